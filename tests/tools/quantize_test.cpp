// `mtp quantize`: the per-tensor plan follows llama-quantize's policy (docs/formats.md section 4),
// --keep copies bytes, the output reads back, and a killed run leaves nothing under the output name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "cli_util.h"
#include "fixtures.h"
#include "quant/quantize.h"
#include "surgery/quantize.h"

namespace mtp {
namespace {

using testing::synth_file;
using testing::TempDir;

// A qwen35moe whose every row length is a multiple of 256 (as in the real 35B-A3B), with n_gqa 8 and 4
// experts, 8 trunk layers + MTP: the mixture rules apply as they do to the real model (block_count 9, so the
// "first eighth" of layers is blk.0).
surgery::SynthOptions policy_model(GgmlType type, int64_t n_expert = 4) {
  surgery::SynthOptions opt = testing::tiny_variant(true, [&](Qwen35MoeConfig& c) {
    c.n_embd = 256;
    c.n_head = 8;
    c.n_head_kv = 1;
    c.head_dim = 32;
    c.n_rot = 8;
    c.n_expert = n_expert;
    c.n_expert_used = 2;
    c.n_ff_exp = 256;
    c.n_ff_shexp = 256;
    c.ssm_d_state = 64;
    c.ssm_n_group = 2;
    c.ssm_dt_rank = 4;
    c.ssm_d_inner = 256;
    c.n_layer = 8;
  });
  opt.type = type;
  return opt;
}

std::map<std::string, GgmlType> plan_types(const std::string& path, const std::string& target,
                                           std::vector<std::string> keep = {}) {
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.ok());
  surgery::QuantizeOptions o;
  o.target = *surgery::parse_quantize_target(target);
  o.keep = std::move(keep);
  auto plan = surgery::plan_quantization(*f, o);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  std::map<std::string, GgmlType> out;
  for (const auto& p : plan->tensors) out[p.tensor->name] = p.to;
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST(QuantizePlan, Iq4XsFollowsTheDocumentedPolicy) {
  TempDir dir;
  auto path = synth_file(dir, "m.gguf", policy_model(GgmlType::F16));
  auto types = plan_types(path, "IQ4_XS");
  ASSERT_EQ(types.size(), GgufFile::open(path)->tensors().size());  // every tensor planned
  for (const auto& [name, type] : types) {
    GgmlType want = GgmlType::IQ4_XS;
    if (name == "output.weight")
      want = GgmlType::Q6_K;
    else if (ends_with(name, "norm.weight") || ends_with(name, "ssm_a") || ends_with(name, "ssm_dt.bias") ||
             ends_with(name, "ssm_conv1d.weight") || ends_with(name, "ffn_gate_inp.weight") ||
             ends_with(name, "ffn_gate_inp_shexp.weight")) {
      want = GgmlType::F32;  // kept as stored
    } else if (ends_with(name, "attn_v.weight") || ends_with(name, "attn_qkv.weight")) {
      want = GgmlType::Q5_K;  // attn_v-like with n_gqa 8
    } else if (name.find("ffn_down") != std::string::npos && name.rfind("blk.0.", 0) == 0) {
      want = GgmlType::Q5_K;  // first block_count/8 layers, no imatrix
    }
    EXPECT_EQ(type, want) << name << ": got " << type_name(type) << ", want " << type_name(want);
  }
  EXPECT_EQ(types.at("token_embd.weight"), GgmlType::IQ4_XS);
  EXPECT_EQ(types.at("blk.8.nextn.eh_proj.weight"), GgmlType::IQ4_XS);
  EXPECT_EQ(types.at("blk.8.ffn_down_exps.weight"), GgmlType::IQ4_XS);
}

TEST(QuantizePlan, Q6KEverywhereItMayQuantize) {
  TempDir dir;
  auto path = synth_file(dir, "m.gguf", policy_model(GgmlType::F32));
  for (const auto& [name, type] : plan_types(path, "Q6_K")) {
    auto f = GgufFile::open(path);
    const TensorInfo* t = f->find_tensor(name);
    const bool kept = surgery::why_not_quantizable(*t) != nullptr;
    EXPECT_EQ(type, kept ? t->type : GgmlType::Q6_K) << name;
  }
}

// Q4_0 and Q5_0 with an imatrix raise the first block_count / 8 layers' ffn_down to Q4_1 / Q5_1 (llama.cpp
// guards those layers so); without one, nothing is raised. The other tensors keep the default (output: Q6_K).
TEST(QuantizePlan, Q40AndQ50RaiseTheFirstFfnDownWithAnImatrix) {
  TempDir dir;
  auto path = synth_file(dir, "m.gguf", policy_model(GgmlType::F32));
  auto f = GgufFile::open(path);
  for (const std::string target : {"Q4_0", "Q5_0", "Q4_1", "Q5_1"}) {
    for (bool imatrix : {false, true}) {
      surgery::QuantizeOptions o;
      o.target = *surgery::parse_quantize_target(target);
      o.has_imatrix = imatrix;
      auto plan = surgery::plan_quantization(*f, o);
      ASSERT_TRUE(plan.ok()) << plan.status().message();
      for (const auto& p : plan->tensors) {
        const std::string& name = p.tensor->name;
        GgmlType want = o.target.default_type;
        if (surgery::why_not_quantizable(*p.tensor) != nullptr) {
          want = p.tensor->type;
        } else if (name == "output.weight") {
          want = GgmlType::Q6_K;
        } else if (imatrix && name.rfind("blk.0.ffn_down", 0) == 0 && target == "Q4_0") {
          want = GgmlType::Q4_1;
        } else if (imatrix && name.rfind("blk.0.ffn_down", 0) == 0 && target == "Q5_0") {
          want = GgmlType::Q5_1;
        }
        EXPECT_EQ(p.to, want) << target << (imatrix ? " imatrix " : " ") << name << ": got "
                              << type_name(p.to);
      }
    }
  }
}

// llama-quantize's Q3_K_S/M/L rules on the policy model (4 experts, n_gqa 8, block_count 9): Q3_K_M gives the
// first two attn_v-like tensors (in file order) Q5_K and the others Q4_K, every ffn_down Q4_K (block_count /
// 16 is 0 layers of Q5_K) and attn_output Q4_K; Q3_K_L gives all three Q5_K; Q3_K_S none of them.
TEST(QuantizePlan, Q3KMixturesFollowLlamaQuantize) {
  TempDir dir;
  auto path = synth_file(dir, "m.gguf", policy_model(GgmlType::F32));
  auto f = GgufFile::open(path);
  for (const std::string target : {"Q3_K_S", "Q3_K_M", "Q3_K_L"}) {
    surgery::QuantizeOptions o;
    o.target = *surgery::parse_quantize_target(target);
    auto plan = surgery::plan_quantization(*f, o);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    int attn_v_like = 0;
    for (const auto& p : plan->tensors) {
      const std::string& name = p.tensor->name;
      GgmlType want = GgmlType::Q3_K;
      if (surgery::why_not_quantizable(*p.tensor) != nullptr) {
        want = p.tensor->type;
      } else if (name == "output.weight") {
        want = GgmlType::Q6_K;
      } else if (ends_with(name, "attn_v.weight") || ends_with(name, "attn_qkv.weight")) {
        if (target == "Q3_K_M") want = attn_v_like < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
        if (target == "Q3_K_L") want = GgmlType::Q5_K;
        ++attn_v_like;
      } else if (name.find("ffn_down") != std::string::npos) {
        if (target == "Q3_K_M") want = GgmlType::Q4_K;
        if (target == "Q3_K_L") want = GgmlType::Q5_K;
      } else if (ends_with(name, "attn_output.weight")) {
        if (target == "Q3_K_M") want = GgmlType::Q4_K;
        if (target == "Q3_K_L") want = GgmlType::Q5_K;
      }
      EXPECT_EQ(p.to, want) << target << " " << name << ": got " << type_name(p.to);
    }
    EXPECT_GT(attn_v_like, 2) << target;
  }
}

// llama-quantize's Q2_K and Q2_K_S rules on the policy model (4 experts, n_gqa 8, block_count 9): Q2_K gives
// attn_v-like tensors Q4_K (n_gqa >= 4), ffn_down and attn_output Q3_K; Q2_K_S gives attn_v-like Q4_K and the
// first block_count / 8 layers' ffn_down Q4_K, and needs an imatrix for the Q2_K tensors.
TEST(QuantizePlan, Q2KMixturesFollowLlamaQuantize) {
  TempDir dir;
  auto path = synth_file(dir, "m.gguf", policy_model(GgmlType::F32));
  auto f = GgufFile::open(path);
  for (const std::string target : {"Q2_K", "Q2_K_S"}) {
    surgery::QuantizeOptions o;
    o.target = *surgery::parse_quantize_target(target);
    o.has_imatrix = target == "Q2_K_S";
    auto plan = surgery::plan_quantization(*f, o);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    int counted = 0;
    for (const auto& p : plan->tensors) {
      const std::string& name = p.tensor->name;
      GgmlType want = GgmlType::Q2_K;
      if (surgery::why_not_quantizable(*p.tensor) != nullptr) {
        want = p.tensor->type;
      } else if (name == "output.weight") {
        want = GgmlType::Q6_K;
      } else if (ends_with(name, "attn_v.weight") || ends_with(name, "attn_qkv.weight")) {
        want = GgmlType::Q4_K;
        ++counted;
      } else if (name.find("ffn_down") != std::string::npos) {
        if (target == "Q2_K") want = GgmlType::Q3_K;
        if (target == "Q2_K_S" && name.rfind("blk.0.", 0) == 0) want = GgmlType::Q4_K;
      } else if (ends_with(name, "attn_output.weight") && target == "Q2_K") {
        want = GgmlType::Q3_K;
      }
      EXPECT_EQ(p.to, want) << target << " " << name << ": got " << type_name(p.to);
    }
    EXPECT_GT(counted, 2) << target;
  }
  surgery::QuantizeOptions o;
  o.target = *surgery::parse_quantize_target("q2_k_s");
  auto refused = surgery::plan_quantization(*f, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("Q2_K_S needs an importance matrix"), std::string::npos)
      << refused.status().message();
}

// A legacy imatrix with weights 1 for every matrix of `path` that may be quantized except `skip`, and the
// trailer (chunk count 12, dataset "calib.txt").
void write_legacy_imatrix(const std::string& path, const std::string& out, const std::string& skip) {
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  std::vector<uint8_t> bytes(4);
  auto put_i32 = [&](int32_t v) {
    const auto* b = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), b, b + 4);
  };
  int32_t n = 0;
  for (const TensorInfo& t : f->tensors()) {
    if (surgery::why_not_quantizable(t) != nullptr || t.name == skip) continue;
    put_i32(static_cast<int32_t>(t.name.size()));
    bytes.insert(bytes.end(), t.name.begin(), t.name.end());
    const int32_t nval = static_cast<int32_t>(t.ne[0] * t.ne[2]);
    put_i32(1);
    put_i32(nval);
    for (int32_t i = 0; i < nval; ++i) put_i32(0x3f800000);  // 1.0f
    ++n;
  }
  std::memcpy(bytes.data(), &n, 4);
  put_i32(12);
  put_i32(9);
  bytes.insert(bytes.end(), {'c', 'a', 'l', 'i', 'b', '.', 't', 'x', 't'});
  testing::write_bytes(out, bytes);
}

// Q2_K_S with an importance matrix: every Q2_K tensor needs its entry (llama-quantize stops on the first one
// without), and the output names the imatrix's dataset and chunk count as llama-quantize does.
TEST(Quantize, Q2KSNeedsAnImatrixEntryPerQ2KTensor) {
  TempDir dir;
  const std::string in = synth_file(dir, "p.gguf", policy_model(GgmlType::F32));
  write_legacy_imatrix(in, dir.file("partial.dat"), "blk.3.ffn_up_exps.weight");
  auto r = testing::run_mtp(
      "quantize " + in + " " + dir.file("o.gguf") + " Q2_K_S --imatrix " + dir.file("partial.dat"), true);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("blk.3.ffn_up_exps.weight': the importance matrix has no entry"), std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.gguf")));
  write_legacy_imatrix(in, dir.file("full.dat"), "");
  r = testing::run_mtp(
      "quantize " + in + " " + dir.file("o.gguf") + " Q2_K_S --imatrix " + dir.file("full.dat"), true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto out = GgufFile::open(dir.file("o.gguf"));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->find_tensor("blk.3.ffn_up_exps.weight")->type, GgmlType::Q2_K);
  EXPECT_EQ(*out->metadata().get_string("quantize.imatrix.dataset"), "calib.txt");
  EXPECT_EQ(*out->metadata().get_integer("quantize.imatrix.chunks_count"), 12);
}

// llama-quantize's MXFP4_MOE: expert stacks (a third dimension) in MXFP4, every other quantizable matrix
// (output.weight and token_embd.weight too) in Q8_0.
TEST(QuantizePlan, Mxfp4MoeExpertStacksOnly) {
  TempDir dir;
  auto path = synth_file(dir, "m.gguf", policy_model(GgmlType::F32));
  auto f = GgufFile::open(path);
  surgery::QuantizeOptions o;
  o.target = *surgery::parse_quantize_target("mxfp4_moe");
  EXPECT_EQ(o.target.file_type, 38u);
  auto plan = surgery::plan_quantization(*f, o);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  int stacks = 0;
  for (const auto& p : plan->tensors) {
    const std::string& name = p.tensor->name;
    GgmlType want = GgmlType::Q8_0;
    if (surgery::why_not_quantizable(*p.tensor) != nullptr) {
      want = p.tensor->type;
    } else if (p.tensor->ne[2] > 1) {
      want = GgmlType::MXFP4;
      ++stacks;
    }
    EXPECT_EQ(p.to, want) << name << ": got " << type_name(p.to);
  }
  EXPECT_GT(stacks, 2);
}

TEST(QuantizePlan, EightExpertsAndFallbacks) {
  TempDir dir;
  // tiny: 8 experts (attn_v-like and attn_k -> Q8_0, attn_output -> Q5_K with llama's 8-expert rules), and
  // 64-wide rows, which IQ4_XS cannot hold (-> IQ4_NL) nor Q4_K (-> Q5_0).
  auto path = synth_file(dir, "t.gguf", testing::synth_options(true));
  auto iq4 = plan_types(path, "IQ4_XS");
  EXPECT_EQ(iq4.at("blk.3.attn_v.weight"), GgmlType::Q8_0);
  EXPECT_EQ(iq4.at("blk.3.attn_k.weight"), GgmlType::Q8_0);
  EXPECT_EQ(iq4.at("blk.0.attn_qkv.weight"), GgmlType::Q8_0);
  EXPECT_EQ(iq4.at("blk.1.ssm_out.weight"), GgmlType::IQ4_NL);
  EXPECT_EQ(iq4.at("output.weight"), GgmlType::Q8_0);  // 64 % 256 != 0
  auto q4k = plan_types(path, "Q4_K");
  EXPECT_EQ(q4k.at("blk.1.ffn_gate_exps.weight"), GgmlType::Q5_0);
}

TEST(QuantizePlan, OverridesAndTargets) {
  EXPECT_EQ(surgery::parse_quantize_target("iq4_xs")->file_type, 30u);
  EXPECT_EQ(surgery::parse_quantize_target("18")->default_type, GgmlType::Q6_K);
  EXPECT_EQ(surgery::parse_quantize_target("Q4_K")->file_type, 15u);  // Q4_K_M, as llama-quantize
  EXPECT_EQ(surgery::parse_quantize_target("q3_k")->file_type, 12u);  // Q3_K_M, as llama-quantize
  EXPECT_EQ(surgery::parse_quantize_target("q2_k")->file_type, 10u);
  EXPECT_EQ(surgery::parse_quantize_target("Q4_1")->file_type, 3u);
  EXPECT_EQ(surgery::parse_quantize_target("q5_1")->default_type, GgmlType::Q5_1);
  EXPECT_FALSE(surgery::parse_quantize_target("IQ2_XXS").ok());
  EXPECT_FALSE(surgery::parse_tensor_type_override("ffn_down").ok());
  EXPECT_FALSE(surgery::parse_tensor_type_override("ffn_(=q8_0").ok());
  EXPECT_FALSE(surgery::parse_tensor_type_override("ffn_down=q9").ok());
  TempDir dir;
  auto path = synth_file(dir, "m.gguf", policy_model(GgmlType::F32));
  auto f = GgufFile::open(path);
  surgery::QuantizeOptions o;
  o.target = *surgery::parse_quantize_target("IQ4_XS");
  o.tensor_types.push_back(*surgery::parse_tensor_type_override("FFN_DOWN=q8_0"));  // lowercased like llama
  o.output_type = GgmlType::F16;
  auto plan = surgery::plan_quantization(*f, o);
  ASSERT_TRUE(plan.ok());
  for (const auto& p : plan->tensors) {
    if (p.tensor->name.find("ffn_down") != std::string::npos) {
      EXPECT_EQ(p.to, GgmlType::Q8_0) << p.tensor->name;
    }
    if (p.tensor->name == "output.weight") {
      EXPECT_EQ(p.to, GgmlType::F16);
    }
  }
}

TEST(Quantize, KeepCopiesBytesAndTheOutputReadsBack) {
  TempDir dir;
  auto in = synth_file(dir, "in.gguf", testing::synth_options(true, GgmlType::F16));
  ThreadPool pool(2);
  surgery::QuantizeOptions o;
  o.target = *surgery::parse_quantize_target("IQ4_XS");
  o.keep = {"blk.4.*"};
  auto r = surgery::quantize_file(in, dir.file("out.gguf"), o, nullptr, "", pool);
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto a = GgufFile::open(in);
  auto b = GgufFile::open(dir.file("out.gguf"));
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(*b->metadata().get<uint32_t>("general.file_type"), 30u);
  EXPECT_EQ(b->metadata().entries().back().key, "general.file_type");
  EXPECT_EQ(b->metadata().entries()[b->metadata().size() - 2].key, "general.quantization_version");
  for (const TensorInfo& t : a->tensors()) {
    const TensorInfo* u = b->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    if (t.name.rfind("blk.4.", 0) == 0) {
      auto x = a->tensor_data(t), y = b->tensor_data(*u);
      EXPECT_EQ(u->type, t.type) << t.name;
      EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << t.name;
    } else if (u->type != t.type) {
      // Converted: close to the source values (4-bit-class error on unit-scale rows).
      std::vector<float> src(static_cast<size_t>(t.n_elements())), dst(src.size());
      ASSERT_TRUE(dequantize_row(t.type, a->tensor_data(t).data(), src.data(), t.n_elements()).ok());
      ASSERT_TRUE(dequantize_row(u->type, b->tensor_data(*u).data(), dst.data(), t.n_elements()).ok());
      double err = 0, ref = 0;
      for (size_t i = 0; i < src.size(); ++i) {
        err += (src[i] - dst[i]) * (src[i] - dst[i]);
        ref += src[i] * src[i];
      }
      EXPECT_LT(std::sqrt(err / ref), 0.15) << t.name;
    }
  }
}

TEST(Quantize, RequantizesQuantizedInput) {
  TempDir dir;
  auto in = synth_file(dir, "q8.gguf", testing::synth_options(false, GgmlType::Q8_0));
  auto r = testing::run_mtp("quantize " + in + " " + dir.file("q4.gguf") + " --type q4_0 -t 2", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("peak RSS"), std::string::npos);
  auto b = GgufFile::open(dir.file("q4.gguf"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->find_tensor("blk.0.ffn_up_exps.weight")->type, GgmlType::Q4_0);
}

TEST(Quantize, DryRunPrintsThePlanAndWritesNothing) {
  TempDir dir;
  auto r =
      testing::run_mtp("quantize tests/data/example.gguf " + dir.file("x.gguf") + " --type IQ4_XS --dry-run");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("blk.4.nextn.eh_proj.weight"), std::string::npos);
  EXPECT_NE(r.output.find("total: 96 tensors"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
  EXPECT_EQ(testing::run_mtp("quantize tests/data/example.gguf " + dir.file("x.gguf") + " --type IQ2_XXS")
                .exit_code,
            2);
  // Q2_K_S without an importance matrix: one line, nothing written.
  r = testing::run_mtp("quantize " + synth_file(dir, "p.gguf", policy_model(GgmlType::F32)) + " " +
                           dir.file("x.gguf") + " --type Q2_K_S",
                       true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("Q2_K_S needs an importance matrix"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
  EXPECT_EQ(
      testing::run_mtp("quantize tests/data/example.gguf tests/data/example.gguf --type Q8_0").exit_code, 2);
  // A dry run checks the importance matrix too; the type is given once, positionally or by --type.
  r = testing::run_mtp("quantize tests/data/example.gguf " + dir.file("x.gguf") +
                           " --type IQ4_XS --dry-run --imatrix " + dir.file("missing.dat"),
                       true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing.dat"), std::string::npos) << r.output;
  r = testing::run_mtp("quantize tests/data/example.gguf " + dir.file("x.gguf") + " Q8_0 --type Q4_K", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("the target type is given twice"), std::string::npos) << r.output;
  r = testing::run_mtp("quantize tests/data/example.gguf " + dir.file("x.gguf") + " Q8_0 --dry-run");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("total: 96 tensors"), std::string::npos) << r.output;
  // The help names the positionals and says the type is required.
  r = testing::run_mtp("quantize --help");
  EXPECT_NE(r.output.find("Usage: mtp quantize [OPTIONS] input output [type]"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--type TEXT                 Target (required, here or as the third positional)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Excludes"), std::string::npos) << r.output;
}

// The temporary files of dir/out.gguf (AtomicFile's `.out.gguf.tmp.XXXXXX`) and their sizes.
std::vector<std::pair<std::string, uintmax_t>> temporaries_with_sizes(const TempDir& dir) {
  std::vector<std::pair<std::string, uintmax_t>> out;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    if (e.path().filename().string().rfind(".out.gguf.tmp.", 0) != 0) continue;
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(e.path(), ec);
    out.emplace_back(e.path().filename().string(), ec ? 0 : size);
  }
  return out;
}

std::vector<std::string> temporaries(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& [name, size] : temporaries_with_sizes(dir)) out.push_back(name);
  return out;
}

// Starts `mtp quantize` of a 120 MB F32 model to IQ4_XS on one thread (seconds of work) into dir/out.gguf
// and sends `sig` once it is part-way: its temporary file holds bytes. The writer writes the GGUF index only
// after AtomicFile::create has registered the file for removal on SIGINT/SIGTERM, so a file that exists but
// is still empty may not be registered yet; waiting for bytes, not for a fixed time, is what makes the signal
// land inside the write. Returns the wait status, or -1 when no byte appeared before the process ended or 20
// s passed.
int quantize_and_signal(const TempDir& dir, int sig) {
  auto in = synth_file(dir, "big.gguf", policy_model(GgmlType::F32, 16));
  const std::string out = dir.file("out.gguf");
  pid_t pid = fork();
  if (pid == 0) {
    execl(MTP_BINARY, MTP_BINARY, "quantize", in.c_str(), out.c_str(), "--type", "IQ4_XS", "-t", "1",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  for (int i = 0; i < 4000; ++i) {  // 20 s at most
    for (const auto& [name, size] : temporaries_with_sizes(dir)) {
      if (size == 0) continue;
      kill(pid, sig);
      waitpid(pid, &status, 0);
      return status;
    }
    if (waitpid(pid, &status, WNOHANG) == pid) return -1;  // ended before it wrote anything
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

TEST(Quantize, KilledPartWayLeavesNoFileAtTheOutputPath) {
  TempDir dir;
  const int status = quantize_and_signal(dir, SIGKILL);
  ASSERT_NE(status, -1) << "quantize wrote nothing to its temporary file";
  ASSERT_TRUE(WIFSIGNALED(status)) << "quantize finished before it could be killed; make the input bigger";
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.gguf")));
  // SIGKILL leaves the temporary file; the next run to that path names it.
  const std::vector<std::string> left = temporaries(dir);
  ASSERT_EQ(left.size(), 1u);
  auto r = testing::run_mtp("synth -o " + dir.file("out.gguf"), true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find(dir.file(left[0]) + ": a temporary file left by an earlier run that did not finish"),
      std::string::npos)
      << r.output;
}

// SIGINT and SIGTERM remove the temporary file before the process ends by the signal.
TEST(Quantize, InterruptedRemovesItsTemporaryFile) {
  for (int sig : {SIGINT, SIGTERM}) {
    TempDir dir;
    const int status = quantize_and_signal(dir, sig);
    ASSERT_NE(status, -1) << "quantize wrote nothing to its temporary file";
    ASSERT_TRUE(WIFSIGNALED(status)) << "quantize finished before the signal; make the input bigger";
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_FALSE(std::filesystem::exists(dir.file("out.gguf")));
    EXPECT_TRUE(temporaries(dir).empty()) << "signal " << sig;
  }
}

}  // namespace
}  // namespace mtp
