#include "speculative/drafter.h"

namespace mtp::speculative {

Status check_draft_params(const DraftParams& p) {
  if (p.n_max < 0 || p.n_max > kMaxDraftTokens)
    return invalid_argument("draft n_max must be in [0, ", kMaxDraftTokens, "], got ", p.n_max);
  // A request that turns drafting off (n_max 0) keeps the server's n_min: it does not matter then.
  if (p.n_min < 0 || (p.n_max > 0 && p.n_min > p.n_max))
    return invalid_argument("draft n_min must be in [0, n_max = ", p.n_max, "], got ", p.n_min);
  return check_in_range("draft p_min", p.p_min, kDraftPMin);
}

}  // namespace mtp::speculative
