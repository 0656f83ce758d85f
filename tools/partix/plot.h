// Loss curves for `partix train --plot`: one chart layout, drawn as SVG or as PNG.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace partix::cli {

struct Rgb {
  uint8_t r, g, b;
};

// Chart coordinates are pixels, y down: pixel (i, j) covers [i, i+1) x [j, j+1), so a 1 px
// line along x = i + 0.5 fills exactly column i in the PNG and is crisp in the SVG too.
struct Point {
  double x, y;
};

// A polyline; round caps and joins. One point draws a dot.
struct Stroke {
  std::vector<Point> points;
  double width;
  Rgb color;
};

// Text anchored at `at`: horizontally at its start, middle or end, vertically at its middle.
struct Label {
  enum class Align { kStart, kMiddle, kEnd };
  Point at;
  std::string text;
  Align align;

  double left() const;  // the x of the text's left edge, in LossChart's character metrics
};

// Everything either format draws, decided once so the SVG and the PNG are the same picture.
struct LossChart {
  // Text is monospace: each character advances kCharWidth and is kCharHeight tall (the PNG's
  // bitmap font at 2x; the SVG asks for a monospace font of about the same size).
  static constexpr double kCharWidth = 12, kCharHeight = 14;
  static constexpr Rgb kInk{0, 0, 0}, kCurveColor{70, 130, 180};  // black, steelblue

  int width = 640, height = 360;
  double left = 0, right = 0, top = 0, bottom = 0;  // the plot area
  double lo = 0, hi = 1;                            // the loss at the bottom and at the top
  size_t last_step = 0;                             // the step at the right edge
  std::vector<Stroke> strokes;  // axes and ticks, then the curve (one stroke per finite run)
  std::vector<Label> labels;

  double x(size_t step) const;
  double y(double loss) const;
  static double text_width(const std::string& text);
};

// loss[i] is the loss after step i. Non-finite values (a diverged run) leave gaps.
LossChart layout_loss_chart(const std::vector<double>& loss);

// Throws partix::Error unless the path ends in .svg or .png (in any case); run before
// training, so a typo does not cost a finished run its plot.
void check_plot_path(const std::string& path);

// Writes the loss curve as SVG or PNG, chosen by the path's extension.
void write_loss_plot(const std::string& path, const std::vector<double>& loss);

}  // namespace partix::cli
