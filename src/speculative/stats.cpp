#include "speculative/stats.h"

#include <algorithm>
#include <cstdio>

#include "base/check.h"

namespace mtp::speculative {

void SpecStats::add_round(int64_t n_drafted, int64_t n_accepted) {
  MTP_CHECK(n_drafted > 0 && n_accepted >= 0 && n_accepted <= n_drafted);
  ++rounds;
  drafted += n_drafted;
  accepted += n_accepted;
  if (static_cast<int64_t>(drafted_at.size()) < n_drafted) {
    drafted_at.resize(static_cast<size_t>(n_drafted), 0);
    accepted_at.resize(static_cast<size_t>(n_drafted), 0);
  }
  for (int64_t i = 0; i < n_drafted; ++i) ++drafted_at[static_cast<size_t>(i)];
  for (int64_t i = 0; i < n_accepted; ++i) ++accepted_at[static_cast<size_t>(i)];
}

void SpecStats::merge(const SpecStats& o) {
  rounds += o.rounds;
  drafted += o.drafted;
  accepted += o.accepted;
  const size_t n = std::max(drafted_at.size(), o.drafted_at.size());
  drafted_at.resize(n, 0);
  accepted_at.resize(n, 0);
  for (size_t i = 0; i < o.drafted_at.size(); ++i) {
    drafted_at[i] += o.drafted_at[i];
    accepted_at[i] += o.accepted_at[i];
  }
}

double SpecStats::mean_acc_len() const {
  return rounds > 0 ? 1.0 + static_cast<double>(accepted) / static_cast<double>(rounds) : 1.0;
}

std::vector<double> SpecStats::acc_rate_per_pos() const {
  std::vector<double> r;
  if (rounds == 0) return r;
  for (int64_t a : accepted_at) r.push_back(static_cast<double>(a) / static_cast<double>(rounds));
  return r;
}

std::vector<double> SpecStats::acc_rate_given_drafted() const {
  std::vector<double> r;
  for (size_t i = 0; i < drafted_at.size(); ++i)
    r.push_back(drafted_at[i] > 0 ? static_cast<double>(accepted_at[i]) / static_cast<double>(drafted_at[i])
                                  : 0.0);
  return r;
}

std::string SpecStats::summary() const {
  std::string s = "#gen tokens = " + std::to_string(drafted) + ", #acc tokens = " + std::to_string(accepted);
  char buf[64];
  std::snprintf(buf, sizeof buf, ", #mean acc len = %.3f", mean_acc_len());
  s += buf;
  s += ", #acc rate/pos = (";
  const std::vector<double> r = acc_rate_per_pos();
  for (size_t i = 0; i < r.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? ", " : "", r[i]);
    s += buf;
  }
  s += ")";
  return s;
}

}  // namespace mtp::speculative
