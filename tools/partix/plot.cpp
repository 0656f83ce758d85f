// The loss chart's layout, and its two renderers: SVG text, and a small RGB rasteriser whose
// pixels libpng encodes. Both draw the same LossChart; neither computes geometry of its own.
#include "plot.h"

#include <fmt/format.h>
#include <png.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstddef>

#include "files/atomic_file.h"
#include "partix/partix.h"

namespace partix::cli {

namespace {

constexpr double kTick = 5;     // tick length outside the plot area
constexpr double kGap = 4;      // between a tick and its label
constexpr double kMargin = 12;  // around the whole chart

bool ends_with_ci(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  // suffix is lower case.
  return std::equal(
      s.end() - static_cast<std::ptrdiff_t>(suffix.size()), s.end(), suffix.begin(),
      [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
}

// ---- SVG -----------------------------------------------------------------------------------

std::string hex(Rgb c) { return fmt::format("#{:02x}{:02x}{:02x}", c.r, c.g, c.b); }

std::string render_svg(const LossChart& c) {
  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{0}' height='{1}' viewBox='0 0 {0} {1}'>\n"
      "<rect width='{0}' height='{1}' fill='white'/>\n",
      c.width, c.height);
  for (const Stroke& k : c.strokes) {
    std::string pts;
    for (const Point& p : k.points)
      pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", p.x, p.y);
    // A one-point polyline draws nothing in SVG; a zero-length line with round caps is a dot.
    if (k.points.size() == 1) pts += " " + pts;
    s += fmt::format(
        "<polyline fill='none' stroke='{}' stroke-width='{}' stroke-linecap='round' "
        "stroke-linejoin='round' points='{}'/>\n",
        hex(k.color), k.width, pts);
  }
  for (const Label& l : c.labels) {
    const char* anchor = l.align == Label::Align::kStart    ? "start"
                         : l.align == Label::Align::kMiddle ? "middle"
                                                            : "end";
    // Monospace at 20 px advances ~12 px a character with ~14 px digits: the PNG font's size.
    s += fmt::format(
        "<text x='{:.1f}' y='{:.1f}' text-anchor='{}' dominant-baseline='central' "
        "font-family='monospace' font-size='20'>{}</text>\n",
        l.at.x, l.at.y, anchor, l.text);
  }
  return s + "</svg>\n";
}

void write_svg(const std::string& path, const LossChart& c) {
  detail::write_file_atomic(path, "train", render_svg(c));
}

// ---- PNG -----------------------------------------------------------------------------------

// 5x7 glyphs, one byte a row, bit 4 the leftmost column: the characters of "%.4g" numbers
// and of the axis titles "loss" and "step".
struct Glyph {
  char c;
  std::array<uint8_t, 7> rows;
};
constexpr Glyph kFont[] = {
    {'0', {0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110}},
    {'1', {0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'2', {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111}},
    {'3', {0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110}},
    {'4', {0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010}},
    {'5', {0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110}},
    {'6', {0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110}},
    {'7', {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000}},
    {'8', {0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110}},
    {'9', {0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100}},
    {'.', {0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b01100}},
    {'-', {0b00000, 0b00000, 0b00000, 0b01110, 0b00000, 0b00000, 0b00000}},
    {'+', {0b00000, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0b00000}},
    {'e', {0b00000, 0b00000, 0b01110, 0b10001, 0b11111, 0b10000, 0b01110}},
    {'l', {0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'o', {0b00000, 0b00000, 0b01110, 0b10001, 0b10001, 0b10001, 0b01110}},
    {'s', {0b00000, 0b00000, 0b01111, 0b10000, 0b01110, 0b00001, 0b11110}},
    {'t', {0b01000, 0b01000, 0b11100, 0b01000, 0b01000, 0b01001, 0b00110}},
    {'p', {0b00000, 0b00000, 0b11110, 0b10001, 0b11110, 0b10000, 0b10000}},
};
// Anything else (never produced by the layout) shows as a box rather than vanishing.
constexpr Glyph kMissing{'?', {0b11111, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b11111}};
constexpr int kFontScale = 2;  // 5x7 -> 10x14 px; advance 6 -> 12 px (LossChart::kCharWidth)

const Glyph& glyph(char c) {
  for (const Glyph& g : kFont)
    if (g.c == c) return g;
  return kMissing;
}

struct Canvas {
  int w, h;
  std::vector<uint8_t> rgb;

  Canvas(int width, int height)
      : w(width), h(height), rgb(static_cast<size_t>(w) * static_cast<size_t>(h) * 3, 255) {}

  // Paints colour c over pixel (x, y) with opacity a in [0, 1].
  void blend(int x, int y, Rgb c, double a) {
    if (x < 0 || y < 0 || x >= w || y >= h || a <= 0) return;
    uint8_t* p =
        &rgb[(static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)) * 3];
    const uint8_t src[3] = {c.r, c.g, c.b};
    for (int i = 0; i < 3; ++i)
      p[i] = static_cast<uint8_t>(std::lround(p[i] + (src[i] - p[i]) * std::min(a, 1.0)));
  }
};

double distance_to_segment(Point p, Point a, Point b) {
  double dx = b.x - a.x, dy = b.y - a.y, len2 = dx * dx + dy * dy;
  double t = len2 > 0 ? std::clamp(((p.x - a.x) * dx + (p.y - a.y) * dy) / len2, 0.0, 1.0) : 0.0;
  return std::hypot(p.x - (a.x + t * dx), p.y - (a.y + t * dy));
}

// Anti-aliased by distance: a pixel whose centre lies within width/2 of the polyline is fully
// covered, and coverage falls to zero over the next pixel. Coverage is the maximum over the
// segments, so joints, where neighbouring segments overlap, are not painted twice.
void draw_stroke(Canvas& c, const Stroke& s) {
  if (s.points.empty()) return;
  const double reach = s.width / 2 + 0.5;
  double x0 = s.points[0].x, x1 = x0, y0 = s.points[0].y, y1 = y0;
  for (const Point& p : s.points) {
    x0 = std::min(x0, p.x), x1 = std::max(x1, p.x), y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
  }
  const int bx = std::max(0, static_cast<int>(std::floor(x0 - reach)));
  const int by = std::max(0, static_cast<int>(std::floor(y0 - reach)));
  const int ex = std::min(c.w, static_cast<int>(std::ceil(x1 + reach)) + 1);
  const int ey = std::min(c.h, static_cast<int>(std::ceil(y1 + reach)) + 1);
  if (bx >= ex || by >= ey) return;
  std::vector<double> cover(static_cast<size_t>(ex - bx) * static_cast<size_t>(ey - by), 0.0);
  auto at = [&](int x, int y) -> double& {
    return cover[static_cast<size_t>(y - by) * static_cast<size_t>(ex - bx) +
                 static_cast<size_t>(x - bx)];
  };
  const size_t segments = std::max<size_t>(s.points.size() - 1, 1);
  for (size_t i = 0; i < segments; ++i) {
    Point a = s.points[i], b = s.points[std::min(i + 1, s.points.size() - 1)];
    int sx = std::max(bx, static_cast<int>(std::floor(std::min(a.x, b.x) - reach)));
    int sy = std::max(by, static_cast<int>(std::floor(std::min(a.y, b.y) - reach)));
    int tx = std::min(ex, static_cast<int>(std::ceil(std::max(a.x, b.x) + reach)) + 1);
    int ty = std::min(ey, static_cast<int>(std::ceil(std::max(a.y, b.y) + reach)) + 1);
    for (int y = sy; y < ty; ++y) {
      for (int x = sx; x < tx; ++x) {
        double d = distance_to_segment({x + 0.5, y + 0.5}, a, b);
        at(x, y) = std::max(at(x, y), std::clamp(reach - d, 0.0, 1.0));
      }
    }
  }
  for (int y = by; y < ey; ++y)
    for (int x = bx; x < ex; ++x) c.blend(x, y, s.color, at(x, y));
}

void draw_label(Canvas& c, const Label& l) {
  // Whole pixels: a bitmap font smeared across pixel boundaries is harder to read.
  const int x0 = static_cast<int>(std::lround(l.left())),
            y0 = static_cast<int>(std::lround(l.at.y - LossChart::kCharHeight / 2));
  const int advance = static_cast<int>(LossChart::kCharWidth);
  for (size_t i = 0; i < l.text.size(); ++i) {
    const Glyph& g = glyph(l.text[i]);
    for (int row = 0; row < 7; ++row) {
      for (int col = 0; col < 5; ++col) {
        if (!((g.rows[static_cast<size_t>(row)] >> (4 - col)) & 1)) continue;
        for (int dy = 0; dy < kFontScale; ++dy)
          for (int dx = 0; dx < kFontScale; ++dx)
            c.blend(x0 + static_cast<int>(i) * advance + col * kFontScale + dx,
                    y0 + row * kFontScale + dy, LossChart::kInk, 1.0);
      }
    }
  }
}

void write_png(const std::string& path, const LossChart& chart) {
  Canvas c(chart.width, chart.height);
  for (const Stroke& s : chart.strokes) draw_stroke(c, s);
  for (const Label& l : chart.labels) draw_label(c, l);
  // libpng's simplified API reports errors in the struct instead of longjmp-ing through C++
  // frames. Encoded in memory (size first, then the bytes), written by the checked writer.
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(c.w);
  img.height = static_cast<png_uint_32>(c.h);
  img.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  std::string bytes;
  bool ok = png_image_write_get_memory_size(img, size, 0, c.rgb.data(), 0, nullptr);
  if (ok) {
    bytes.resize(size);
    ok = png_image_write_to_memory(&img, bytes.data(), &size, 0, c.rgb.data(), 0, nullptr);
    bytes.resize(size);
  }
  if (!ok) {
    std::string why = img.message;
    png_image_free(&img);
    throw Error("[train] cannot encode the plot for '" + path + "': " + why);
  }
  png_image_free(&img);
  detail::write_file_atomic(path, "train", bytes);
}

}  // namespace

// ---- layout --------------------------------------------------------------------------------

double LossChart::x(size_t step) const {
  if (last_step == 0) return left;
  return left + (right - left) * static_cast<double>(step) / static_cast<double>(last_step);
}

double LossChart::y(double loss) const { return bottom - (bottom - top) * (loss - lo) / (hi - lo); }

double Label::left() const {
  const double w = LossChart::text_width(text);
  return align == Align::kStart ? at.x : align == Align::kMiddle ? at.x - w / 2 : at.x - w;
}

double LossChart::text_width(const std::string& text) {
  // The last character's trailing gap is not part of the text.
  return text.empty() ? 0 : static_cast<double>(text.size()) * kCharWidth - kCharWidth / 6;
}

LossChart layout_loss_chart(const std::vector<double>& loss) {
  if (loss.empty()) throw Error("[train] no loss values to plot");
  LossChart c;
  bool any = false;
  for (double v : loss) {
    if (!std::isfinite(v)) continue;
    c.lo = any ? std::min(c.lo, v) : v;
    c.hi = any ? std::max(c.hi, v) : v;
    any = true;
  }
  if (c.hi - c.lo < 1e-9) c.hi = c.lo + 1;  // a flat curve sits on the bottom axis
  c.last_step = loss.size() - 1;

  const std::array<double, 3> y_ticks = {c.lo, (c.lo + c.hi) / 2, c.hi};
  std::vector<size_t> x_ticks = {0};
  if (c.last_step >= 2) x_ticks.push_back(c.last_step / 2);
  if (c.last_step >= 1) x_ticks.push_back(c.last_step);
  std::vector<std::string> y_text, x_text;
  double widest = 0;
  for (double v : y_ticks) {
    y_text.push_back(fmt::format("{:.4g}", v));
    widest = std::max(widest, LossChart::text_width(y_text.back()));
  }
  for (size_t s : x_ticks) x_text.push_back(fmt::format("{}", s));

  // Margins fit the tick labels; edges on half pixels keep the 1 px axes crisp (see Point).
  c.left = std::round(kMargin + widest + kGap + kTick) + 0.5;
  c.right =
      std::round(c.width - std::max(kMargin, LossChart::text_width(x_text.back()) / 2 + kMargin)) -
      0.5;
  c.top = std::round(kMargin + LossChart::kCharHeight + kGap + 2 * kTick) + 0.5;
  c.bottom = std::round(c.height - (kMargin + 2 * LossChart::kCharHeight + 3 * kGap + kTick)) - 0.5;

  c.strokes.push_back(
      {{{c.left, c.top}, {c.left, c.bottom}, {c.right, c.bottom}}, 1, LossChart::kInk});
  for (size_t i = 0; i < y_ticks.size(); ++i) {
    double y = c.y(y_ticks[i]);
    c.strokes.push_back({{{c.left - kTick, y}, {c.left, y}}, 1, LossChart::kInk});
    c.labels.push_back({{c.left - kTick - kGap, y}, y_text[i], Label::Align::kEnd});
  }
  const double x_label_y = c.bottom + kTick + kGap + LossChart::kCharHeight / 2;
  for (size_t i = 0; i < x_ticks.size(); ++i) {
    double x = c.x(x_ticks[i]);
    c.strokes.push_back({{{x, c.bottom}, {x, c.bottom + kTick}}, 1, LossChart::kInk});
    c.labels.push_back({{x, x_label_y}, x_text[i], Label::Align::kMiddle});
  }
  c.labels.push_back({{(c.left + c.right) / 2, x_label_y + LossChart::kCharHeight + kGap},
                      "step",
                      Label::Align::kMiddle});
  c.labels.push_back(
      {{c.left, kMargin + LossChart::kCharHeight / 2}, "loss", Label::Align::kMiddle});

  // The curve, broken where the loss is not finite.
  Stroke run{{}, 2, LossChart::kCurveColor};
  for (size_t i = 0; i <= loss.size(); ++i) {
    if (i < loss.size() && std::isfinite(loss[i])) {
      run.points.push_back({c.x(i), c.y(loss[i])});
    } else if (!run.points.empty()) {
      c.strokes.push_back(run);
      run.points.clear();
    }
  }
  return c;
}

void check_plot_path(const std::string& path) {
  if (!ends_with_ci(path, ".svg") && !ends_with_ci(path, ".png"))
    throw Error("[train] --plot must end in .svg or .png, got '" + path + "'");
}

void write_loss_plot(const std::string& path, const std::vector<double>& loss) {
  check_plot_path(path);
  LossChart chart = layout_loss_chart(loss);
  if (ends_with_ci(path, ".png"))
    write_png(path, chart);
  else
    write_svg(path, chart);
}

}  // namespace partix::cli
