// `mtp report --html`: the page's markup is balanced, it holds one <svg> per chart with a marker per level,
// and it references nothing outside itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "loadgen/report_html.h"
#include "loadgen/svg_chart.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

// "" when every element is closed in order (void elements and `/>` need no end tag), else the first
// mismatch. Stands in for an HTML parser: the page is generated, so strict nesting is what it must have.
std::string unbalanced_tag(const std::string& html) {
  static const std::set<std::string> kVoid = {"meta", "br", "hr", "img", "input", "link"};
  std::vector<std::string> open;
  for (size_t pos = html.find('<'); pos != std::string::npos; pos = html.find('<', pos + 1)) {
    const size_t end = html.find('>', pos);
    if (end == std::string::npos) return "a '<' never closed";
    const std::string tag = html.substr(pos + 1, end - pos - 1);
    if (tag.starts_with("!")) continue;  // <!DOCTYPE html>
    const bool closing = tag.starts_with("/");
    const std::string name =
        tag.substr(closing ? 1 : 0, tag.find_first_of(" />", closing ? 1 : 0) - (closing ? 1 : 0));
    if (closing) {
      if (open.empty() || open.back() != name)
        return "</" + name + "> closes <" + (open.empty() ? "" : open.back()) + ">";
      open.pop_back();
    } else if (!tag.ends_with("/") && !kVoid.contains(name)) {
      open.push_back(name);
    }
  }
  return open.empty() ? "" : "<" + open.back() + "> never closed";
}

// The text of each <svg>...</svg> in order.
std::vector<std::string> svgs(const std::string& html) {
  std::vector<std::string> out;
  for (size_t pos = html.find("<svg"); pos != std::string::npos; pos = html.find("<svg", pos + 1))
    out.push_back(html.substr(pos, html.find("</svg>", pos) - pos));
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

RunData read(const std::string& name, const std::string& text) {
  const std::string path = write_temp(name, text);
  auto run = read_run(path);
  std::filesystem::remove(path);
  EXPECT_TRUE(run.ok()) << run.status().message();
  return run.ok() ? *run : RunData{};
}

TEST(ReportHtml, OneChartPerFigureWithAMarkerPerLevelAndNoExternalReference) {
  const std::string html = html_report(read("html_fixture", fixture()), "run<1>.jsonl");
  EXPECT_EQ(unbalanced_tag(html), "");
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_EQ(html.find("http://"), std::string::npos);  // the fixture's URL is http://x
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("run&lt;1&gt;.jsonl"), std::string::npos);
  // Throughput, TPOT, acceptance per position (level 1 has mtp.cpp's positions); no baseline, no speedup.
  const std::vector<std::string> charts = svgs(html);
  ASSERT_EQ(charts.size(), 3u);
  EXPECT_EQ(count(html, "<figure>"), 3u);
  EXPECT_EQ(count(charts[0], "class=\"pt\""), 2u);                                // two levels
  EXPECT_EQ(count(charts[1], "class=\"pt\""), 2u * 2);                            // p50 and p99 of each
  EXPECT_EQ(count(charts[2], "class=\"pt\""), 2u);                                // one level, two positions
  EXPECT_NE(charts[2].find("c=1 at 1: 0.6667"), std::string::npos) << charts[2];  // (0.5*2 + 1*1) / 3 rounds
}

TEST(ReportHtml, APairedRunAddsTheSpeedupWithItsInterval) {
  // Two levels, each with three prompts answered by both servers; the target twice as fast per request.
  std::string text = kFixtureHeader;
  int id = 0;
  for (int level : {1, 2}) {
    for (int n = 0; n < 3; ++n) {
      for (const char* server : {"target", "baseline"}) {
        const int t0 = 1000 * level + 100 * n, e2e = server[0] == 't' ? 20 + n : 40 + 3 * n;
        std::string line = req(id, level, 0, false, t0, t0, t0 + 5, t0 + e2e, 10, true);
        line.insert(line.size() - 2, str_cat(R"(,"server":")", server, R"(","pair":)", n));
        text += ev(id, t0 + e2e, 10) + line;
        ++id;
      }
    }
  }
  const std::string html = html_report(read("html_paired", text), "paired.jsonl");
  EXPECT_EQ(unbalanced_tag(html), "");
  const std::vector<std::string> charts = svgs(html);
  ASSERT_EQ(charts.size(), 3u);                         // throughput, TPOT, speedup (no draft positions)
  EXPECT_EQ(count(charts[0], "class=\"pt\""), 2u * 2);  // a series per server
  EXPECT_NE(charts[2].find("class=\"ref\""), std::string::npos);  // the line at 1
  EXPECT_EQ(count(charts[2], "class=\"pt\""), 2u);
  EXPECT_EQ(count(charts[2], "class=\"bar\""), 2u);  // the 95% intervals
  EXPECT_NE(html.find("Paired speedup"), std::string::npos);
}

TEST(ReportHtml, ChartTextIsEscapedAndEmptyValuesLeaveNoPoint) {
  Chart c{"a <b> & \"c\"", "x", "y", {"1", "2/s c<=4"}, {{"s", {1.0, NAN}, {}, {}}}, NAN};
  const std::string svg = svg_chart(c);
  EXPECT_EQ(unbalanced_tag(svg), "");
  EXPECT_NE(svg.find("2/s c&lt;=4"), std::string::npos);
  EXPECT_NE(svg.find("a &lt;b&gt; &amp; &#34;c&#34;"), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"pt\""), 1u);
}

}  // namespace
}  // namespace mtp::loadgen
