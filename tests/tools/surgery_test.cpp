// `mtp graft` and `mtp extract-head`: grafting a synthetic head onto a synthetic trunk gives exactly the file
// `mtp synth --mtp` writes, and every compatibility check trips on a head that differs in what it checks.
#include <gtest/gtest.h>

#include "cli_util.h"
#include "fixtures.h"
#include "surgery/graft.h"
#include "surgery/inspect_report.h"

namespace mtp {
namespace {

using testing::synth_file;
using testing::synth_options;
using testing::TempDir;
using testing::tiny_variant;

Expected<surgery::GraftResult> graft(const std::string& trunk, const std::string& head,
                                     const std::string& out, surgery::GraftOptions options = {}) {
  ThreadPool pool(2);
  return surgery::graft(trunk, head, out, options, pool);
}

TEST(Graft, SyntheticHeadOnSyntheticTrunkIsTheSynthModelWithMtp) {
  TempDir dir;
  for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0}) {
    auto trunk = synth_file(dir, "trunk.gguf", synth_options(false, type));
    auto full = synth_file(dir, "full.gguf", synth_options(true, type));
    auto r = graft(trunk, full, dir.file("out.gguf"));
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->block, 4);
    EXPECT_EQ(r->head_tensors, 20u);
    EXPECT_EQ(testing::read_bytes(dir.file("out.gguf")), testing::read_bytes(full)) << type_name(type);
  }
}

TEST(Graft, HeadOnlyFileRoundTrip) {
  TempDir dir;
  auto trunk = synth_file(dir, "trunk.gguf", synth_options(false));
  auto full = synth_file(dir, "full.gguf", synth_options(true));
  ThreadPool pool(2);
  auto e = surgery::extract_head(full, dir.file("head.gguf"), false, pool);
  ASSERT_TRUE(e.ok()) << e.status().message();
  auto head = GgufFile::open(dir.file("head.gguf"));
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->tensors().size(), 20u);
  EXPECT_EQ(head->find_tensor("token_embd.weight"), nullptr);
  EXPECT_EQ(*head->metadata().get<uint64_t>("mtp.head.n_vocab"), 512u);
  EXPECT_TRUE(surgery::build_inspect_report(*head).head_only);
  auto r = graft(trunk, dir.file("head.gguf"), dir.file("out.gguf"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(testing::read_bytes(dir.file("out.gguf")), testing::read_bytes(full));
}

TEST(Graft, RenumbersTheBlockToTheTrunkDepth) {
  TempDir dir;
  auto opt = synth_options(false);
  opt.layers = 2;
  auto trunk = synth_file(dir, "trunk2.gguf", opt);
  auto full = synth_file(dir, "full4.gguf", synth_options(true));  // head at blk.4
  auto r = graft(trunk, full, dir.file("out.gguf"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->block, 2);
  auto out = GgufFile::open(dir.file("out.gguf"));
  auto src = GgufFile::open(full);
  ASSERT_TRUE(out.ok() && src.ok());
  EXPECT_EQ(*out->metadata().get<uint32_t>("qwen35moe.block_count"), 3u);
  EXPECT_EQ(*out->metadata().get<uint32_t>("qwen35moe.nextn_predict_layers"), 1u);
  // nextn_predict_layers sits right after block_count, where llama.cpp's converter writes it.
  const auto& kvs = out->metadata().entries();
  for (size_t i = 0; i + 1 < kvs.size(); ++i) {
    if (kvs[i].key == "qwen35moe.block_count") {
      EXPECT_EQ(kvs[i + 1].key, "qwen35moe.nextn_predict_layers");
    }
  }
  for (const TensorInfo& t : src->tensors()) {
    if (t.name.rfind("blk.4.", 0) != 0) continue;
    const TensorInfo* g = out->find_tensor("blk.2." + t.name.substr(6));
    ASSERT_NE(g, nullptr) << t.name;
    auto a = src->tensor_data(t), b = out->tensor_data(*g);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << t.name;
  }
  EXPECT_EQ(out->find_tensor("blk.4.attn_q.weight"), nullptr);
}

TEST(Graft, HeadTypeConvertsOnlyTheWeightMatrices) {
  TempDir dir;
  auto trunk = synth_file(dir, "trunk.gguf", synth_options(false));
  auto full = synth_file(dir, "full.gguf", synth_options(true));
  surgery::GraftOptions o;
  o.head_type = GgmlType::Q8_0;
  ASSERT_TRUE(graft(trunk, full, dir.file("out.gguf"), o).ok());
  auto out = GgufFile::open(dir.file("out.gguf"));
  EXPECT_EQ(out->find_tensor("blk.4.nextn.eh_proj.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(out->find_tensor("blk.4.ffn_gate_exps.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(out->find_tensor("blk.4.nextn.enorm.weight")->type, GgmlType::F32);
  EXPECT_EQ(out->find_tensor("blk.4.ffn_gate_inp.weight")->type, GgmlType::F32);  // the router stays
  EXPECT_EQ(out->find_tensor("blk.3.attn_q.weight")->type, GgmlType::F32);        // trunk untouched
}

// A --head-type whose blocks do not divide a tensor's rows falls back as llama.cpp's quantizer does, and
// the result says so for each tensor rather than writing another type quietly.
TEST(Graft, HeadTypeFallbacksAreReported) {
  TempDir dir;
  auto trunk = synth_file(dir, "trunk.gguf", synth_options(false));
  auto full = synth_file(dir, "full.gguf", synth_options(true));
  auto src = GgufFile::open(full);
  const TensorInfo* eh = src->find_tensor("blk.4.nextn.eh_proj.weight");
  ASSERT_NE(eh, nullptr);
  ASSERT_NE(eh->ne[0] % 256, 0) << "the tiny shape's rows must not divide into q6_K blocks for this test";
  surgery::GraftOptions o;
  o.head_type = GgmlType::Q6_K;
  auto r = graft(trunk, full, dir.file("out.gguf"), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto out = GgufFile::open(dir.file("out.gguf"));
  const GgmlType got = out->find_tensor("blk.4.nextn.eh_proj.weight")->type;
  EXPECT_NE(got, GgmlType::Q6_K);
  bool reported = false;
  for (const std::string& f : r->type_fallbacks) {
    EXPECT_NE(f.find("instead of q6_K"), std::string::npos) << f;
    reported |= f.rfind("blk.4.nextn.eh_proj.weight: " + std::string(type_name(got)), 0) == 0;
  }
  EXPECT_TRUE(reported);
  // Types that divide report nothing.
  o.head_type = GgmlType::Q8_0;
  r = graft(trunk, full, dir.file("out8.gguf"), o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->type_fallbacks.empty());
}

TEST(Graft, WithEmbeddingsGivesTheBlockItsOwnCopies) {
  TempDir dir;
  auto trunk = synth_file(dir, "trunk.gguf", synth_options(false));
  auto donor = synth_file(dir, "donor.gguf", synth_options(true, GgmlType::F32, 7));
  surgery::GraftOptions o;
  o.with_embeddings = true;
  ASSERT_TRUE(graft(trunk, donor, dir.file("out.gguf"), o).ok());
  auto out = GgufFile::open(dir.file("out.gguf"));
  auto src = GgufFile::open(donor);
  const TensorInfo* e = out->find_tensor("blk.4.nextn.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  auto a = out->tensor_data(*e), b = src->tensor_data(*src->find_tensor("token_embd.weight"));
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  EXPECT_NE(out->find_tensor("blk.4.nextn.shared_head_head.weight"), nullptr);
}

TEST(Graft, WithEmbeddingsThroughAHeadOnlyFile) {
  TempDir dir;
  auto trunk = synth_file(dir, "trunk.gguf", synth_options(false));
  auto donor = synth_file(dir, "donor.gguf", synth_options(true, GgmlType::F32, 7));
  ThreadPool pool(2);
  ASSERT_TRUE(surgery::extract_head(donor, dir.file("bare.gguf"), false, pool).ok());
  ASSERT_TRUE(surgery::extract_head(donor, dir.file("full.gguf"), true, pool).ok());
  surgery::GraftOptions o;
  o.with_embeddings = true;
  auto bare = graft(trunk, dir.file("bare.gguf"), dir.file("out1.gguf"), o);
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.status().message().find("carries no embeddings"), std::string::npos)
      << bare.status().message();
  ASSERT_TRUE(graft(trunk, dir.file("full.gguf"), dir.file("out2.gguf"), o).ok());
  // The same file as grafting straight from the donor model.
  ASSERT_TRUE(graft(trunk, donor, dir.file("out3.gguf"), o).ok());
  EXPECT_EQ(testing::read_bytes(dir.file("out2.gguf")), testing::read_bytes(dir.file("out3.gguf")));
}

// Each case: a head that differs in one checked property, and a fragment the refusal must contain.
struct Mismatch {
  const char* what;
  std::function<std::string(const TempDir&)> make_head;
  const char* message;
  bool overridable;
};

TEST(Graft, EveryCompatibilityCheckTrips) {
  TempDir dir;
  auto trunk = synth_file(dir, "trunk.gguf", synth_options(false));
  auto full = synth_file(dir, "full.gguf", synth_options(true));
  auto variant = [&](const char* name, const std::function<void(Qwen35MoeConfig&)>& edit) {
    return [=](const TempDir& d) { return synth_file(d, name, tiny_variant(true, edit)); };
  };
  auto edited = [&](const char* name, const std::function<void(Metadata&)>& edit) {
    return [=](const TempDir& d) { return testing::with_metadata(full, d.file(name), edit); };
  };
  const std::vector<Mismatch> cases = {
      {"architecture",
       edited("arch.gguf", [](Metadata& md) { md.set("general.architecture", Value::string("llama")); }),
       "architecture: trunk has 'qwen35moe', head has 'llama'", false},
      {"n_embd", variant("embd.gguf", [](auto& c) { c.n_embd = 128; }),
       "embedding_length: trunk has 64, head has 128", false},
      {"vocab", variant("vocab.gguf", [](auto& c) { c.n_vocab = 600; }),
       "vocabulary size: trunk has 512, head has 600", false},
      {"tokenizer",
       edited("tok.gguf",
              [](Metadata& md) {
                auto tokens = **md.get_string_array("tokenizer.ggml.tokens");
                tokens[300] = "different";
                md.set("tokenizer.ggml.tokens", Value::string_array(tokens));
              }),
       "tokenizer: trunk fingerprint", true},
      {"experts", variant("exp.gguf", [](auto& c) { c.n_expert = 4; }),
       "expert_count: trunk has 8, head has 4", false},
      {"expert shapes", variant("exp2.gguf", [](auto& c) { c.n_expert = 4; }),
       "(experts x width: trunk config implies 8 x 32)", false},
      {"expert width", variant("ffw.gguf", [](auto& c) { c.n_ff_exp = 64; }),
       "expert_feed_forward_length: trunk has 32, head has 64", false},
      {"head count", variant("heads.gguf", [](auto& c) { c.n_head = 8; }),
       "attention.head_count: trunk has 4, head has 8", false},
      {"kv heads", variant("kv.gguf", [](auto& c) { c.n_head_kv = 1; }),
       "attention.head_count_kv: trunk has 2, head has 1", false},
      {"head dim",
       variant("dim.gguf",
               [](auto& c) {
                 c.head_dim = 16;
                 c.n_rot = 4;
               }),
       "attention.key_length: trunk has 32, head has 16", false},
      {"rope base", variant("rope.gguf", [](auto& c) { c.rope_freq_base = 1e6f; }), "rope.freq_base", true},
      {"no mtp", [&](const TempDir&) { return trunk; }, "has no MTP block", false},
  };
  for (const Mismatch& m : cases) {
    std::string head = m.make_head(dir);
    auto r = graft(trunk, head, dir.file("out.gguf"));
    ASSERT_FALSE(r.ok()) << m.what;
    EXPECT_NE(r.status().message().find(m.message), std::string::npos)
        << m.what << ": " << r.status().message();
    EXPECT_FALSE(std::filesystem::exists(dir.file("out.gguf"))) << m.what;
    surgery::GraftOptions force;
    force.force = true;
    EXPECT_EQ(graft(trunk, head, dir.file("forced.gguf"), force).ok(), m.overridable) << m.what;
    std::filesystem::remove(dir.file("forced.gguf"));
  }
}

TEST(Graft, ExistingMtpBlockNeedsReplace) {
  TempDir dir;
  auto full = synth_file(dir, "full.gguf", synth_options(true));
  auto donor = synth_file(dir, "donor.gguf", synth_options(true, GgmlType::F32, 9));
  auto r = graft(full, donor, dir.file("out.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("already has an MTP block"), std::string::npos);
  surgery::GraftOptions o;
  o.replace = true;
  ASSERT_TRUE(graft(full, donor, dir.file("out.gguf"), o).ok());
  auto out = GgufFile::open(dir.file("out.gguf"));
  auto d = GgufFile::open(donor);
  EXPECT_EQ(out->tensors().size(), 96u);
  auto a = out->tensor_data(*out->find_tensor("blk.4.nextn.eh_proj.weight"));
  auto b = d->tensor_data(*d->find_tensor("blk.4.nextn.eh_proj.weight"));
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
}

TEST(Graft, CliExitCodesAndMessages) {
  TempDir dir;
  auto trunk = synth_file(dir, "trunk.gguf", synth_options(false));
  auto r =
      testing::run_mtp("graft --trunk " + trunk + " --head " + trunk + " -o " + dir.file("o.gguf"), true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("has no MTP block"), std::string::npos) << r.output;
  EXPECT_EQ(testing::run_mtp("graft --trunk " + trunk).exit_code, 2);
  // A head type mtp cannot write is refused, not replaced by another.
  r = testing::run_mtp("graft --trunk " + trunk + " --head tests/data/example.gguf --head-type iq2_xxs -o " +
                           dir.file("o.gguf"),
                       true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("cannot write iq2_xxs"), std::string::npos) << r.output;
  EXPECT_EQ(testing::run_mtp("extract-head " + trunk + " -o " + dir.file("h.gguf")).exit_code, 1);
}

// A head of another width is a bad file (exit code 1) in run and serve, as in graft.
TEST(Graft, AHeadThatDoesNotFitIsABadFileEverywhere) {
  TempDir dir;
  auto trunk = synth_file(dir, "trunk.gguf", synth_options(false));
  auto wide = synth_file(dir, "wide.gguf",
                         testing::tiny_variant(true, [](Qwen35MoeConfig& c) { c.n_ff_shexp *= 2; }));
  ASSERT_EQ(testing::run_mtp("extract-head " + wide + " -o " + dir.file("head.gguf")).exit_code, 0);
  const std::string head = dir.file("head.gguf");
  auto g = testing::run_mtp("graft --trunk " + trunk + " --head " + head + " -o " + dir.file("o.gguf"), true);
  EXPECT_EQ(g.exit_code, 1) << g.output;
  for (const std::string cmd : {"run -p hi -n 2", "serve"}) {
    auto r = testing::run_mtp(cmd + " -m " + trunk + " --spec mtp --head " + head, true);
    EXPECT_EQ(r.exit_code, 1) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("the head does not fit the model: expert_shared_feed_forward_length"),
              std::string::npos)
        << cmd << ": " << r.output;
  }
}

}  // namespace
}  // namespace mtp
