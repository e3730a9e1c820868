// The C++ reference against reference_check.py, an independent pure-Python implementation of the same spec
// (double precision, no shared code), on the tiny F32 model: trunk logits and MTP draft logits per position.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "fixtures.h"
#include "model/reference_forward.h"

namespace mtp {
namespace {

using testing::fixtures;

std::vector<std::vector<double>> read_rows(const std::string& path, std::vector<std::string>* tags) {
  std::ifstream in(path);
  std::vector<std::vector<double>> rows;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string tag, pos;
    ls >> tag >> pos;
    tags->push_back(tag + pos);
    rows.emplace_back();
    for (double v; ls >> v;) rows.back().push_back(v);
  }
  return rows;
}

TEST(CrossCheck, MatchesTheIndependentPythonReference) {
  if (std::system("python3 --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const std::vector<int32_t> tokens = {84, 258, 32, 400, 105, 99};
  std::string token_list;
  for (int32_t t : tokens) token_list += std::to_string(t) + " ";
  testing::TempDir dir;
  const std::string out = dir.file("py.txt");
  const std::string cmd = "python3 '" + std::string(MTP_SOURCE_DIR) + "/tests/model/reference_check.py' '" +
                          fixtures().tiny_mtp + "' '" + token_list + "' '" + out + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<std::string> tags;
  const auto py = read_rows(out, &tags);

  auto m = Model::load(fixtures().tiny_mtp);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ReferenceState st(m->config());
  std::vector<std::vector<float>> cpp;
  std::vector<std::string> cpp_tags;
  std::vector<float> h_prev;
  for (size_t p = 0; p < tokens.size(); ++p) {
    ForwardOutput o = forward_token(*m, st, tokens[p], static_cast<int64_t>(p));
    cpp.push_back(o.logits);
    cpp_tags.push_back("T" + std::to_string(p));
    if (p >= 1) {
      cpp.push_back(mtp_draft_logits(*m, st, h_prev, tokens[p], static_cast<int64_t>(p)).logits);
      cpp_tags.push_back("M" + std::to_string(p));
    }
    h_prev = o.hidden;
  }
  ASSERT_EQ(tags, cpp_tags);
  for (size_t r = 0; r < py.size(); ++r) {
    ASSERT_EQ(py[r].size(), cpp[r].size()) << tags[r];
    double max_diff = 0;
    for (size_t i = 0; i < py[r].size(); ++i) max_diff = std::max(max_diff, std::abs(py[r][i] - cpp[r][i]));
    EXPECT_LT(max_diff, 2e-5) << tags[r];
  }
}

}  // namespace
}  // namespace mtp
