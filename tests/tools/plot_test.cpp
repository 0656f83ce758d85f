// partix train --plot: the loss chart written as PNG (read back with libpng) and as SVG, from
// the same layout; bad extensions and unwritable paths are partix::Errors naming the path.
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "plot.h"
#include "test_util.h"

namespace partix::cli {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/partix_plot_" + std::to_string(::getpid()) + "_" + name;
}

// A falling curve like a training run's: 5 e^(-i/8) + 1 over 40 steps.
std::vector<double> falling(size_t n = 40) {
  std::vector<double> v;
  for (size_t i = 0; i < n; ++i) v.push_back(5 * std::exp(-static_cast<double>(i) / 8) + 1);
  return v;
}

struct Image {
  int w = 0, h = 0;
  std::vector<uint8_t> rgb;
  Rgb at(int x, int y) const {
    const uint8_t* p =
        &rgb[(static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)) * 3];
    return {p[0], p[1], p[2]};
  }
};

Image read_png(const std::string& path) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, path.c_str())) {
    ADD_FAILURE() << "libpng cannot read " << path << ": " << img.message;
    return {};
  }
  img.format = PNG_FORMAT_RGB;
  Image out{static_cast<int>(img.width), static_cast<int>(img.height),
            std::vector<uint8_t>(PNG_IMAGE_SIZE(img))};
  if (!png_image_finish_read(&img, nullptr, out.rgb.data(), 0, nullptr)) {
    ADD_FAILURE() << "libpng cannot decode " << path << ": " << img.message;
    return {};
  }
  return out;
}

bool is_blue(Rgb c) { return c.b >= c.r + 60 && c.b > c.g; }
// Any visible share of the curve's colour, anti-aliased edges included.
bool is_tinted(Rgb c) { return c.b > c.r + 20; }
bool is_white(Rgb c) { return c.r == 255 && c.g == 255 && c.b == 255; }
bool is_black(Rgb c) { return c.r == 0 && c.g == 0 && c.b == 0; }

// Whether some pixel within `r` of chart point p is blue.
bool blue_near(const Image& im, Point p, int r = 1) {
  const int cx = static_cast<int>(std::floor(p.x)), cy = static_cast<int>(std::floor(p.y));
  for (int y = cy - r; y <= cy + r; ++y)
    for (int x = cx - r; x <= cx + r; ++x)
      if (x >= 0 && y >= 0 && x < im.w && y < im.h && is_blue(im.at(x, y))) return true;
  return false;
}

TEST(PlotTest, PngOfAFallingCurve) {
  const std::vector<double> loss = falling();
  const LossChart chart = layout_loss_chart(loss);
  const std::string path = temp_path("loss.png");
  write_loss_plot(path, loss);
  const Image im = read_png(path);
  std::filesystem::remove(path);
  ASSERT_EQ(im.w, chart.width);
  ASSERT_EQ(im.h, chart.height);
  EXPECT_EQ(im.w, 640);
  EXPECT_EQ(im.h, 360);

  // White background: the corners, and the empty top right of the plot area.
  const std::array<std::pair<int, int>, 4> corners{
      {{0, 0}, {im.w - 1, 0}, {0, im.h - 1}, {im.w - 1, im.h - 1}}};
  for (auto [x, y] : corners) EXPECT_TRUE(is_white(im.at(x, y))) << x << "," << y;
  EXPECT_TRUE(
      is_white(im.at(static_cast<int>(chart.right) - 20, static_cast<int>(chart.top) + 20)));

  // A falling curve starts top left and ends bottom right.
  const Point start{chart.x(0), chart.y(loss.front())},
      end{chart.x(loss.size() - 1), chart.y(loss.back())};
  EXPECT_LT(start.x, im.w / 4);
  EXPECT_LT(start.y, im.h / 4);
  EXPECT_GT(end.x, im.w * 3 / 4);
  EXPECT_GT(end.y, im.h * 3 / 4);
  EXPECT_TRUE(blue_near(im, start));
  EXPECT_TRUE(blue_near(im, end));
  // Every step's point is on the curve, and so is every midpoint: the segments are connected.
  for (size_t i = 0; i < loss.size(); ++i) {
    EXPECT_TRUE(blue_near(im, {chart.x(i), chart.y(loss[i])}, 0)) << "step " << i;
    if (i + 1 < loss.size()) {
      Point mid{(chart.x(i) + chart.x(i + 1)) / 2, (chart.y(loss[i]) + chart.y(loss[i + 1])) / 2};
      EXPECT_TRUE(blue_near(im, mid, 0)) << "between steps " << i << " and " << i + 1;
    }
  }
  // About 2 px thick: a column through the nearly flat tail is tinted over 2 to 3 pixels
  // (the anti-aliased edges included), not 1 and not a smear.
  const int col = static_cast<int>(chart.x(loss.size() - 3));
  int tinted = 0;
  for (int y = 0; y < im.h; ++y) tinted += is_tinted(im.at(col, y));
  EXPECT_GE(tinted, 2);
  EXPECT_LE(tinted, 3);

  // Crisp 1 px black axes, and black label text in the left margin (the loss ticks).
  const int axis_x = static_cast<int>(chart.left), axis_y = static_cast<int>(chart.bottom);
  EXPECT_TRUE(is_black(im.at(axis_x, (axis_y + static_cast<int>(chart.top)) / 2)));
  EXPECT_TRUE(is_white(im.at(axis_x + 1, (axis_y + static_cast<int>(chart.top)) / 2)));
  EXPECT_TRUE(is_black(im.at((axis_x + static_cast<int>(chart.right)) / 2, axis_y)));
  int text = 0;
  for (int y = 0; y < im.h; ++y)
    for (int x = 0; x < axis_x - 8; ++x) text += is_black(im.at(x, y));
  EXPECT_GT(text, 50);
}

TEST(PlotTest, LayoutLabelsTheRangeAndTheSteps) {
  const std::vector<double> loss = falling();
  const LossChart chart = layout_loss_chart(loss);
  EXPECT_DOUBLE_EQ(chart.lo, loss.back());
  EXPECT_DOUBLE_EQ(chart.hi, loss.front());
  EXPECT_DOUBLE_EQ(chart.y(chart.hi), chart.top);
  EXPECT_DOUBLE_EQ(chart.y(chart.lo), chart.bottom);
  std::vector<std::string> texts;
  for (const Label& l : chart.labels) texts.push_back(l.text);
  for (const std::string& want :
       {fmt::format("{:.4g}", loss.front()), fmt::format("{:.4g}", loss.back()), std::string("0"),
        std::string("39"), std::string("loss"), std::string("step")})
    EXPECT_NE(std::find(texts.begin(), texts.end(), want), texts.end()) << want;
  // Every label lies inside the image.
  for (const Label& l : chart.labels) {
    const double x0 = l.left(), w = LossChart::text_width(l.text);
    EXPECT_GE(x0, 0) << l.text;
    EXPECT_LE(x0 + w, chart.width) << l.text;
    EXPECT_GE(l.at.y - LossChart::kCharHeight / 2, 0) << l.text;
    EXPECT_LE(l.at.y + LossChart::kCharHeight / 2, chart.height) << l.text;
  }
}

TEST(PlotTest, SvgHasOnePointPerStep) {
  const std::vector<double> loss = falling();
  const std::string path = temp_path("loss.svg");
  write_loss_plot(path, loss);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::filesystem::remove(path);
  const std::string svg = ss.str();
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  const size_t curve = svg.find("<polyline fill='none' stroke='#4682b4'");
  ASSERT_NE(curve, std::string::npos) << svg;
  const size_t open = svg.find("points='", curve) + 8, close = svg.find('\'', open);
  std::istringstream points(svg.substr(open, close - open));
  std::vector<std::string> pts;
  for (std::string p; points >> p;) pts.push_back(p);
  ASSERT_EQ(pts.size(), loss.size());
  const LossChart chart = layout_loss_chart(loss);
  EXPECT_EQ(pts.front(), fmt::format("{:.1f},{:.1f}", chart.x(0), chart.y(loss.front())));
  EXPECT_EQ(pts.back(),
            fmt::format("{:.1f},{:.1f}", chart.x(loss.size() - 1), chart.y(loss.back())));
  EXPECT_EQ(svg.find("<polyline fill='none' stroke='#4682b4'", curve + 1), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find(">loss</text>"), std::string::npos);
}

TEST(PlotTest, BadExtensionThrowsNamingThePath) {
  EXPECT_PARTIX_ERROR(check_plot_path("x.jpg"),
                      "[train] --plot must end in .svg or .png, got 'x.jpg'");
  EXPECT_PARTIX_ERROR(check_plot_path("loss"), "'loss'");
  EXPECT_PARTIX_ERROR(check_plot_path("loss.svg.txt"), "'loss.svg.txt'");
  EXPECT_NO_THROW(check_plot_path("loss.svg"));
  EXPECT_NO_THROW(check_plot_path("out/LOSS.PNG"));
  const std::string path = temp_path("loss.jpg");
  EXPECT_PARTIX_ERROR(write_loss_plot(path, falling()), path);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(PlotTest, UnwritablePathThrowsNamingIt) {
  for (const std::string& path : {std::string("/nonexistent-partix-dir/loss.png"),
                                  std::string("/nonexistent-partix-dir/loss.svg")})
    EXPECT_PARTIX_ERROR(write_loss_plot(path, falling()), "[train] cannot write", path,
                        "does not exist");
}

TEST(PlotTest, GapsFlatCurvesAndOneStep) {
  std::vector<double> loss = falling(10);
  loss[4] = std::numeric_limits<double>::quiet_NaN();
  loss[5] = std::numeric_limits<double>::infinity();
  const LossChart gaps = layout_loss_chart(loss);
  EXPECT_DOUBLE_EQ(gaps.hi, loss[0]);  // the range ignores the non-finite values
  size_t curves = 0, points = 0;
  for (const Stroke& s : gaps.strokes) {
    if (s.color.b != LossChart::kCurveColor.b) continue;
    ++curves;
    points += s.points.size();
  }
  EXPECT_EQ(curves, 2u);
  EXPECT_EQ(points, 8u);

  const LossChart flat = layout_loss_chart({2.5, 2.5, 2.5});
  EXPECT_DOUBLE_EQ(flat.y(2.5), flat.bottom);

  // One step: a dot at the left edge, in both formats.
  for (const std::string& name : {std::string("one.png"), std::string("one.svg")}) {
    const std::string path = temp_path(name);
    write_loss_plot(path, {3.0});
    EXPECT_GT(std::filesystem::file_size(path), 0u);
    if (name == "one.png") {
      const LossChart one = layout_loss_chart({3.0});
      EXPECT_TRUE(blue_near(read_png(path), {one.x(0), one.y(3.0)}));
    }
    std::filesystem::remove(path);
  }
  EXPECT_PARTIX_ERROR(layout_loss_chart({}), "no loss values");
}

}  // namespace
}  // namespace partix::cli
