// The MTP head's wiring (docs/model.md section 4): which hidden, which token, which half of eh_proj, which KV
// rows at which positions, and which head.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/sampler.h"
#include "fixtures.h"
#include "model/reference_forward.h"
#include "model/reference_ops.h"

namespace mtp {
namespace {

using testing::fixtures;

const std::vector<int32_t> kTokens = {21, 305, 77, 140, 9};

struct Trunk {
  std::vector<std::vector<float>> hidden;  // post-norm hidden of every position
  std::vector<std::vector<float>> logits;
};

Trunk run_trunk(const Model& m) {
  ReferenceState st(m.config());
  Trunk t;
  for (int32_t tok : kTokens) {
    ForwardOutput o = forward_token(m, st, tok, st.n_past);
    t.hidden.push_back(o.hidden);
    t.logits.push_back(o.logits);
  }
  return t;
}

// mtp_draft_logits must equal the section 4.1 recipe assembled here from the public ops and blocks, row after
// row with the MTP KV at the token's position: for position p, h = trunk hidden of p-1, token = token at p.
TEST(MtpHead, EqualsTheRecipeAssembledFromTheOps) {
  auto m = Model::load(fixtures().tiny_mtp);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Qwen35MoeConfig& c = m->config();
  const MtpWeights& w = *m->weights().mtp;
  const int64_t n = c.n_embd;
  const Trunk trunk = run_trunk(*m);

  ReferenceState st(c);
  AttentionKv kv;  // the hand-assembled MTP cache
  for (size_t p = 1; p < kTokens.size(); ++p) {
    ForwardOutput got = mtp_draft_logits(*m, st, trunk.hidden[p - 1], kTokens[p], static_cast<int64_t>(p));

    std::vector<float> e(n), cat(2 * n), x(n), a(n), y(n), h(n), logits(c.n_vocab);
    ref::dequantize_row_of(m->weights().token_embd, kTokens[p], e.data());
    ref::rms_norm(e.data(), ref::to_f32(w.enorm).data(), n, c.rms_eps, cat.data());
    ref::rms_norm(trunk.hidden[p - 1].data(), ref::to_f32(w.hnorm).data(), n, c.rms_eps, cat.data() + n);
    ref::matvec(w.eh_proj, cat.data(), x.data());
    ref::rms_norm(x.data(), ref::to_f32(w.block.attn_norm).data(), n, c.rms_eps, a.data());
    attention_block(c, m->params(), w.block.attn, a.data(), static_cast<int64_t>(p), kv, y.data());
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
    ref::rms_norm(x.data(), ref::to_f32(w.block.post_attention_norm).data(), n, c.rms_eps, a.data());
    moe_ffn(c, m->params(), w.block.moe, a.data(), y.data());
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
    ref::rms_norm(x.data(), ref::to_f32(w.shared_head_norm).data(), n, c.rms_eps, h.data());
    ref::matvec(m->weights().output, h.data(), logits.data());

    EXPECT_EQ(got.hidden, h) << "position " << p;
    EXPECT_EQ(got.logits, logits) << "position " << p;
  }
  EXPECT_EQ(st.mtp.kv.pos, (std::vector<int64_t>{1, 2, 3, 4}));  // no (x_0, h=0) row (section 4.3)
  EXPECT_TRUE(st.layers[0].gdn.conv == ReferenceState(c).layers[0].gdn.conv);  // the trunk state is untouched
}

TEST(MtpHead, DependsOnBothTheHiddenAndTheToken) {
  auto m = Model::load(fixtures().tiny_mtp);
  ASSERT_TRUE(m.ok());
  const Trunk trunk = run_trunk(*m);
  auto draft = [&](const std::vector<float>& h, int32_t tok) {
    ReferenceState st(m->config());
    return mtp_draft_logits(*m, st, h, tok, 1).logits;
  };
  const auto base = draft(trunk.hidden[0], kTokens[1]);
  EXPECT_NE(base, draft(trunk.hidden[1], kTokens[1]));
  EXPECT_NE(base, draft(trunk.hidden[0], kTokens[2]));
  EXPECT_EQ(base, draft(trunk.hidden[0], kTokens[1]));
}

// Re-drafting at a position drops the MTP rows at and after it (rejected drafts), so the result equals a
// fresh state that only ever saw the accepted rows.
TEST(MtpHead, WritingAPositionDropsStaleRows) {
  auto m = Model::load(fixtures().tiny_mtp);
  ASSERT_TRUE(m.ok());
  const Trunk trunk = run_trunk(*m);
  ReferenceState st(m->config()), fresh(m->config());
  for (int64_t p = 1; p <= 3; ++p) mtp_draft_logits(*m, st, trunk.hidden[p - 1], kTokens[p], p);
  const auto redo = mtp_draft_logits(*m, st, trunk.hidden[1], 300, 2).logits;
  mtp_draft_logits(*m, fresh, trunk.hidden[0], kTokens[1], 1);
  EXPECT_EQ(redo, mtp_draft_logits(*m, fresh, trunk.hidden[1], 300, 2).logits);
  EXPECT_EQ(st.mtp.kv.pos, (std::vector<int64_t>{1, 2}));
}

// A constructed head whose answer is known. With the MTP block's residual writers zeroed (attn_output, all
// down projections) the block is the identity on x0 = eh_proj · [ê; ĥ], and with unit norm weights:
//  * eh_proj = [0 | I] keeps only the hidden half: draft logits = output · RMSNorm(h_prev), so given the
//    trunk's post-norm hidden of p-1 the draft is the trunk's own distribution at p-1 (normalised again), and
//    it does not depend on the token;
//  * eh_proj = [I | 0] keeps only the embedding half: draft logits = output · RMSNorm(E[token]), independent
//    of the hidden.
class ConstructedHead : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = Model::load(fixtures().tiny_mtp);
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    base_ = std::make_unique<Model>(std::move(loaded).value());
    const Qwen35MoeConfig& c = base_->config();
    n_ = c.n_embd;
    ones_.assign(n_, 1.0f);
    zeros_.assign(static_cast<size_t>(std::max(c.n_head * c.head_dim, c.n_expert * c.n_ff_exp) * n_), 0.0f);
  }

  Model with_eh_proj(bool keep_hidden) {
    const Qwen35MoeConfig& c = base_->config();
    eh_.assign(static_cast<size_t>(2 * n_ * n_), 0.0f);
    for (int64_t o = 0; o < n_; ++o) eh_[o * 2 * n_ + (keep_hidden ? n_ : 0) + o] = 1.0f;
    Qwen35MoeWeights w = base_->weights();
    MtpWeights& m = *w.mtp;
    auto f32 = [](const std::vector<float>& v, std::array<int64_t, 4> ne) {
      return TensorView{reinterpret_cast<const uint8_t*>(v.data()), GgmlType::F32, ne};
    };
    m.eh_proj = f32(eh_, {2 * n_, n_, 1, 1});
    m.enorm = m.hnorm = m.shared_head_norm = f32(ones_, {n_, 1, 1, 1});
    m.block.attn.output = f32(zeros_, {c.n_head * c.head_dim, n_, 1, 1});
    m.block.moe.down_exps = f32(zeros_, {c.n_ff_exp, n_, c.n_expert, 1});
    m.block.moe.down_shexp = f32(zeros_, {c.n_ff_shexp, n_, 1, 1});
    return Model::from_parts(c, w, {}, base_->params());
  }

  std::vector<float> head_of_normed(const std::vector<float>& v) {
    std::vector<float> h(n_), logits(base_->config().n_vocab);
    ref::rms_norm(v.data(), ones_.data(), n_, base_->config().rms_eps, h.data());
    ref::matvec(base_->weights().output, h.data(), logits.data());
    return logits;
  }

  std::unique_ptr<Model> base_;
  int64_t n_ = 0;
  std::vector<float> ones_, zeros_, eh_;
};

TEST_F(ConstructedHead, HiddenHalfReproducesTheTrunkDistributionOfTheRowBefore) {
  const Model m = with_eh_proj(/*keep_hidden=*/true);
  const Trunk trunk = run_trunk(*base_);
  ReferenceState st(m.config());
  for (int64_t p = 1; p < static_cast<int64_t>(kTokens.size()); ++p) {
    const auto draft = mtp_draft_logits(m, st, trunk.hidden[p - 1], kTokens[p], p).logits;
    const auto expected = head_of_normed(trunk.hidden[p - 1]);
    for (size_t t = 0; t < draft.size(); ++t)
      ASSERT_NEAR(draft[t], expected[t], 1e-4) << "p " << p << " t " << t;
    // The trunk's hidden is already post-norm, so the draft is the trunk's own logits at p-1 times the
    // positive scale 1/rms(h): the same ranking, hence the same greedy token.
    const auto& h = trunk.hidden[p - 1];
    const double inv_rms = 1.0 / std::sqrt(ref::dot(h.data(), h.data(), n_) / n_ + base_->config().rms_eps);
    for (size_t t = 0; t < draft.size(); ++t) ASSERT_NEAR(draft[t], trunk.logits[p - 1][t] * inv_rms, 1e-4);
    EXPECT_EQ(Sampler::argmax(draft), Sampler::argmax(trunk.logits[p - 1]));
    // The token does not matter.
    ReferenceState other(m.config());
    for (int64_t q = 1; q < p; ++q) mtp_draft_logits(m, other, trunk.hidden[q - 1], kTokens[q], q);
    EXPECT_EQ(mtp_draft_logits(m, other, trunk.hidden[p - 1], 123, p).logits, draft);
  }
}

TEST_F(ConstructedHead, EmbeddingHalfPredictsFromTheTokenAlone) {
  const Model m = with_eh_proj(/*keep_hidden=*/false);
  const Trunk trunk = run_trunk(*base_);
  std::vector<float> e(n_);
  ref::dequantize_row_of(base_->weights().token_embd, kTokens[2], e.data());
  std::vector<float> e_normed(n_);
  ref::rms_norm(e.data(), ones_.data(), n_, base_->config().rms_eps, e_normed.data());
  const auto expected = head_of_normed(e_normed);
  ReferenceState a(m.config()), b(m.config());
  const auto draft = mtp_draft_logits(m, a, trunk.hidden[1], kTokens[2], 2).logits;
  for (size_t t = 0; t < draft.size(); ++t) ASSERT_NEAR(draft[t], expected[t], 1e-4) << t;
  EXPECT_EQ(mtp_draft_logits(m, b, trunk.hidden[3], kTokens[2], 2).logits, draft);  // hidden ignored
}

}  // namespace
}  // namespace mtp
