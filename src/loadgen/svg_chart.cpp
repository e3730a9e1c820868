#include "loadgen/svg_chart.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "base/status.h"

namespace mtp::loadgen {
namespace {

constexpr double kWidth = 640, kHeight = 300;
constexpr double kLeft = 64, kRight = 16, kTop = 16, kBottom = 56;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

std::string num(double v, const char* format = "%.1f") {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The top of the y axis: the largest value drawn (bars included), rounded up to 1, 2 or 5 times a power of
// ten, so the five gridlines fall on round numbers.
double axis_top(const Chart& c) {
  double top = std::isnan(c.reference) ? 0 : c.reference;
  for (const ChartSeries& s : c.series) {
    for (double v : s.y)
      if (std::isfinite(v)) top = std::max(top, v);
    for (double v : s.hi)
      if (std::isfinite(v)) top = std::max(top, v);
  }
  if (top <= 0) return 1;
  const double step = std::pow(10.0, std::floor(std::log10(top / 5)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (5 * m * step >= top) return 5 * m * step;
  return 50 * step;
}

struct Frame {
  double top;
  size_t n;
  double x(size_t i) const { return kLeft + (static_cast<double>(i) + 0.5) * (kWidth - kLeft - kRight) / n; }
  double y(double v) const { return kTop + (1 - v / top) * (kHeight - kTop - kBottom); }
};

std::string axes(const Chart& c, const Frame& f) {
  std::string out;
  for (int k = 0; k <= 5; ++k) {
    const double v = f.top * k / 5, y = f.y(v);
    out += str_cat("<line x1=\"", num(kLeft), "\" y1=\"", num(y), "\" x2=\"", num(kWidth - kRight),
                   "\" y2=\"", num(y), "\" class=\"grid\"/>");
    out += str_cat("<text x=\"", num(kLeft - 6), "\" y=\"", num(y + 4), "\" class=\"yt\">", num(v, "%g"),
                   "</text>");
  }
  for (size_t i = 0; i < f.n; ++i)
    out += str_cat("<text x=\"", num(f.x(i)), "\" y=\"", num(kHeight - kBottom + 16), "\" class=\"xt\">",
                   html_escape(c.x_labels[i]), "</text>");
  out += str_cat("<text x=\"", num((kLeft + kWidth - kRight) / 2), "\" y=\"", num(kHeight - 8),
                 "\" class=\"xt\">", html_escape(c.x_label), "</text>");
  out += str_cat("<text x=\"14\" y=\"", num((kTop + kHeight - kBottom) / 2),
                 "\" class=\"yl\" transform=\"rotate(-90 14 ", num((kTop + kHeight - kBottom) / 2), ")\">",
                 html_escape(c.y_label), "</text>");
  if (!std::isnan(c.reference))
    out += str_cat("<line x1=\"", num(kLeft), "\" y1=\"", num(f.y(c.reference)), "\" x2=\"",
                   num(kWidth - kRight), "\" y2=\"", num(f.y(c.reference)), "\" class=\"ref\"/>");
  return out;
}

std::string series_marks(const Chart& c, const ChartSeries& s, const Frame& f, const char* color) {
  std::string line, marks;
  for (size_t i = 0; i < f.n && i < s.y.size(); ++i) {
    if (!std::isfinite(s.y[i])) continue;
    const std::string x = num(f.x(i)), y = num(f.y(s.y[i]));
    line += (line.empty() ? "" : " ") + x + "," + y;
    if (i < s.lo.size() && i < s.hi.size() && std::isfinite(s.lo[i]) && std::isfinite(s.hi[i]))
      marks += str_cat("<line x1=\"", x, "\" y1=\"", num(f.y(s.lo[i])), "\" x2=\"", x, "\" y2=\"",
                       num(f.y(s.hi[i])), "\" stroke=\"", color, "\" class=\"bar\"/>");
    marks += str_cat("<circle class=\"pt\" cx=\"", x, "\" cy=\"", y, "\" r=\"3.5\" fill=\"", color,
                     "\"><title>", html_escape(s.name), " at ", html_escape(c.x_labels[i]), ": ",
                     num(s.y[i], "%.4g"), "</title></circle>");
  }
  return str_cat("<polyline points=\"", line, "\" fill=\"none\" stroke=\"", color, "\"/>", marks);
}

std::string legend(const Chart& c) {
  std::string out;
  for (size_t k = 0; k < c.series.size(); ++k) {
    const double y = kTop + 4 + 16.0 * static_cast<double>(k);
    const char* color = kColors[k % std::size(kColors)];
    out +=
        str_cat("<rect x=\"", num(kWidth - kRight - 150), "\" y=\"", num(y),
                "\" width=\"10\" height=\"10\" fill=\"", color, "\"/><text x=\"", num(kWidth - kRight - 135),
                "\" y=\"", num(y + 9), "\" class=\"lg\">", html_escape(c.series[k].name), "</text>");
  }
  return out;
}

}  // namespace

std::string svg_chart(const Chart& c) {
  const Frame f{axis_top(c), std::max<size_t>(c.x_labels.size(), 1)};
  std::string out = str_cat("<svg viewBox=\"0 0 ", num(kWidth, "%g"), " ", num(kHeight, "%g"), "\" width=\"",
                            num(kWidth, "%g"), "\" height=\"", num(kHeight, "%g"),
                            "\" role=\"img\" aria-label=\"", html_escape(c.title), "\">");
  out += axes(c, f);
  for (size_t k = 0; k < c.series.size(); ++k)
    out += series_marks(c, c.series[k], f, kColors[k % std::size(kColors)]);
  out += legend(c);
  return out + "</svg>";
}

}  // namespace mtp::loadgen
