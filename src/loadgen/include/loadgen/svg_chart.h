// Line charts as inline SVG for the HTML report (report_html.h): categorical x (the levels as they ran, so a
// rate level and a concurrency level share one axis), linear y from zero, one polyline and one marker per
// point for each series, optional error bars, a legend. Plain markup only: no script, no external reference.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "base/html_escape.h"

namespace mtp::loadgen {

struct ChartSeries {
  std::string name;
  std::vector<double> y;       // one per x label; NaN: no point there
  std::vector<double> lo, hi;  // error bar ends per point (empty: none)
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<std::string> x_labels;
  std::vector<ChartSeries> series;
  double reference = NAN;  // a dashed horizontal line at this y (1 for ratios); NaN: none
};

// <svg ...>...</svg>; every point is a <circle class="pt"> with a <title> that states its value.
std::string svg_chart(const Chart& chart);

}  // namespace mtp::loadgen
