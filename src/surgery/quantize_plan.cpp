#include "surgery/quantize_plan.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

#include "gguf/gguf_writer.h"
#include "quant/quantize.h"
#include "surgery/inspect_report.h"
#include "surgery/quant_policy.h"

namespace mtp::surgery {
namespace {

// llama_ftype values used below.
enum Ftype : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 7,
  kQ5_0 = 8,
  kQ5_1 = 9,
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kQ2_K_S = 21,
  kIQ4_NL = 25,
  kIQ4_XS = 30,
  kBF16 = 32,
  kMXFP4_MOE = 38,
};

enum class Category {
  kTokenEmbd,
  kAttnQ,
  kAttnV,
  kAttnK,
  kAttnQkv,
  kAttnKvB,
  kAttnOutput,
  kFfnUp,
  kFfnGate,
  kFfnDown,
  kOutput,
  kOther
};

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

Category category_of(const std::string& name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::kTokenEmbd;
  if (contains(name, "attn_qkv.weight")) return Category::kAttnQkv;
  if (contains(name, "attn_kv_b.weight")) return Category::kAttnKvB;
  if (contains(name, "attn_v.weight")) return Category::kAttnV;
  if (contains(name, "attn_k.weight")) return Category::kAttnK;
  if (contains(name, "attn_q.weight")) return Category::kAttnQ;
  if (contains(name, "attn_output.weight")) return Category::kAttnOutput;
  if (contains(name, "ffn_up")) return Category::kFfnUp;
  if (contains(name, "ffn_gate")) return Category::kFfnGate;
  if (contains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

bool is_attn_v_like(Category c) {
  return c == Category::kAttnV || c == Category::kAttnQkv || c == Category::kAttnKvB;
}

bool use_more_bits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// What the mixture rules need to know about the model.
struct ModelFacts {
  std::string arch;
  int64_t n_expert = 0;
  int64_t n_gqa = 1;
  int64_t n_layer_all = 0;
  int64_t n_attention_wv = 0;
  bool tied_embeddings = true;
};

int64_t first_integer(const Metadata& md, const std::string& key, int64_t fallback) {
  if (auto v = md.get_integer(key); v.ok()) return *v;
  if (auto a = md.get_integer_array(key); a.ok() && !a->empty()) return a->front();  // per-layer arrays
  return fallback;
}

ModelFacts model_facts(const GgufFile& f) {
  ModelFacts m;
  m.arch = f.architecture();
  const std::string p = m.arch + ".";
  const Metadata& md = f.metadata();
  m.n_expert = first_integer(md, p + "expert_count", 0);
  const int64_t n_head = first_integer(md, p + "attention.head_count", 1);
  const int64_t n_head_kv = first_integer(md, p + "attention.head_count_kv", n_head);
  m.n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 1;
  m.n_layer_all = first_integer(md, p + "block_count", 0);
  for (const TensorInfo& t : f.tensors()) {
    if (is_attn_v_like(category_of(t.name))) ++m.n_attention_wv;
    if (t.name == "output.weight") m.tied_embeddings = false;
  }
  return m;
}

class Planner {
 public:
  Planner(const ModelFacts& facts, const QuantizeOptions& opt) : m_(facts), opt_(opt) {}

  Expected<GgmlType> decide(const TensorInfo& t, std::string* reason) {
    for (const std::string& glob : opt_.keep) {
      if (fnmatch(glob.c_str(), t.name.c_str(), 0) == 0) {
        *reason = "kept (--keep " + glob + ")";
        return t.type;
      }
    }
    if (const char* why = why_not_quantizable(t, opt_.leave_output)) {
      *reason = why;
      return t.type;
    }
    const Category cat = category_of(t.name);
    if (opt_.token_embedding_type && cat == Category::kTokenEmbd) {
      *reason = "--token-embedding-type";
      return *opt_.token_embedding_type;
    }
    if (opt_.output_type && cat == Category::kOutput) {
      *reason = "--output-tensor-type";
      return *opt_.output_type;
    }
    const GgmlType d = opt_.target.default_type;
    if (!type_traits(d).is_quantized) {
      *reason = "default";
      return d;
    }
    GgmlType type = d;
    bool manual = false;
    for (const TensorTypeOverride& o : opt_.tensor_types) {
      if (std::regex_search(t.name, o.regex)) {
        type = o.type;
        *reason = "--tensor-type " + o.pattern;
        manual = true;
        break;
      }
    }
    if (!manual && !opt_.pure) {
      *reason = "default";
      MTP_ASSIGN_OR_RETURN(type, mixture(t, cat, type, reason));
    }
    const GgmlType wanted = type;
    type = llama_type_fallback(wanted, t.ne[0]);
    if (type != wanted) *reason = str_cat("fallback from ", type_name(wanted), ": row of ", t.ne[0]);
    if (!opt_.has_imatrix && requires_imatrix(t.name, type, opt_.target.file_type)) {
      return invalid_argument("tensor '", t.name,
                              "': Q2_K_S needs an importance matrix (--imatrix FILE), as ",
                              "llama-quantize does; Q2_K does not");
    }
    if (!type_traits(type).computable) {
      const GgmlType ours = computable_fallback(type, t.ne[0]);
      *reason += str_cat("; llama-quantize would write ", type_name(type), ", not implemented here");
      type = ours;
    }
    return type;
  }

 private:
  // llama_tensor_get_type_impl for the targets mtp quantize supports.
  Expected<GgmlType> mixture(const TensorInfo& t, Category cat, GgmlType type, std::string* reason) {
    const uint32_t ft = opt_.target.file_type;
    const bool falcon = m_.arch == "falcon";
    auto set = [&](GgmlType to, const char* why) {
      type = to;
      *reason = why;
    };
    if (cat == Category::kOutput || (m_.tied_embeddings && cat == Category::kTokenEmbd)) {
      if (opt_.output_type)
        set(*opt_.output_type, "--output-tensor-type");
      else if (ft == kMXFP4_MOE)
        set(GgmlType::Q8_0, "output, MXFP4_MOE");
      else if (falcon || t.ne[0] % type_traits(type).block_size != 0)
        set(GgmlType::Q8_0, "output, row not in blocks");
      else if (type != GgmlType::Q8_0)
        set(GgmlType::Q6_K, "output");
    } else if (ft == kMXFP4_MOE) {
      // Expert stacks (a third dimension) in MXFP4, every other matrix in Q8_0.
      if (t.ne[2] > 1)
        set(GgmlType::MXFP4, "expert stack, MXFP4_MOE");
      else
        set(GgmlType::Q8_0, "not an expert stack, MXFP4_MOE");
    } else if (cat == Category::kTokenEmbd) {
      // No rule for the supported targets: the default type.
    } else if (is_attn_v_like(cat)) {
      if (ft == kQ2_K)
        set(m_.n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K, "attn_v-like, Q2_K");
      else if (ft == kQ2_K_S && m_.n_gqa >= 4)
        set(GgmlType::Q4_K, "attn_v-like, Q2_K_S, n_gqa >= 4");
      else if (ft == kQ3_K_M)
        set(i_attention_wv_ < 2 ? GgmlType::Q5_K : GgmlType::Q4_K, "attn_v-like, Q3_K_M");
      else if (ft == kQ3_K_L)
        set(GgmlType::Q5_K, "attn_v-like, Q3_K_L");
      else if ((ft == kIQ4_NL || ft == kIQ4_XS) && m_.n_gqa >= 4)
        set(GgmlType::Q5_K, "attn_v-like, n_gqa >= 4");
      else if ((ft == kQ4_K_M || ft == kQ5_K_M) && use_more_bits(i_attention_wv_, m_.n_attention_wv)) {
        set(GgmlType::Q6_K, "attn_v-like, use_more_bits");
      } else if (ft == kQ4_K_S && i_attention_wv_ < 4)
        set(GgmlType::Q5_K, "attn_v-like, first 4");
      if (m_.n_expert == 8) set(GgmlType::Q8_0, "attn_v-like, 8 experts");
      ++i_attention_wv_;
    } else if (cat == Category::kAttnK) {
      if (m_.n_expert == 8) set(GgmlType::Q8_0, "attn_k, 8 experts");
    } else if (cat == Category::kFfnDown) {
      int64_t i_layer = i_ffn_down_;
      const int64_t n_layer = m_.n_layer_all;
      if (std::max<int64_t>(1, m_.n_expert) > 1) {
        auto b = block_index(t.name);
        if (!b || *b >= n_layer) {
          return invalid_argument("tensor '", t.name, "': cannot place it in [0, ", n_layer, ") layers");
        }
        i_layer = *b;
      }
      if (ft == kQ2_K) {
        set(GgmlType::Q3_K, "ffn_down, Q2_K");
      } else if (ft == kQ2_K_S) {
        if (i_layer < n_layer / 8) set(GgmlType::Q4_K, "ffn_down, first eighth of layers");
      } else if (ft == kQ3_K_M) {
        if (i_layer < n_layer / 16)
          set(GgmlType::Q5_K, "ffn_down, first sixteenth of layers");
        else if (!falcon || use_more_bits(i_layer, n_layer))
          set(GgmlType::Q4_K, "ffn_down, Q3_K_M");
      } else if (ft == kQ3_K_L) {
        set(falcon ? GgmlType::Q4_K : GgmlType::Q5_K, "ffn_down, Q3_K_L");
      } else if (ft == kQ4_K_M) {
        if (!falcon && use_more_bits(i_layer, n_layer)) set(GgmlType::Q6_K, "ffn_down, use_more_bits");
      } else if (i_layer < n_layer / 8 && (ft == kIQ4_NL || ft == kIQ4_XS) && !opt_.has_imatrix) {
        set(GgmlType::Q5_K, "ffn_down, first eighth of layers, no imatrix");
      } else if (ft == kQ5_K_M && use_more_bits(i_layer, n_layer)) {
        set(GgmlType::Q6_K, "ffn_down, use_more_bits");
      } else if (ft == kQ4_K_S && !falcon && i_layer < n_layer / 8) {
        set(GgmlType::Q5_K, "ffn_down, first eighth of layers");
      } else if ((ft == kQ4_0 || ft == kQ5_0) && opt_.has_imatrix && i_layer < n_layer / 8) {
        set(ft == kQ4_0 ? GgmlType::Q4_1 : GgmlType::Q5_1, "ffn_down, first eighth of layers, imatrix");
      }
      ++i_ffn_down_;
    } else if (cat == Category::kAttnOutput) {
      const bool q5k_with_8_experts = ft == kQ2_K || ft == kQ3_K_S || ft == kQ3_K_M || ft == kIQ4_NL ||
                                      ft == kQ4_K_S || ft == kQ4_K_M || ft == kIQ4_XS;
      if (falcon) {
        if (ft == kQ3_K_L) set(GgmlType::Q4_K, "attn_output, Q3_K_L");
      } else if (m_.n_expert == 8) {
        if (q5k_with_8_experts) set(GgmlType::Q5_K, "attn_output, 8 experts");
      } else if (ft == kQ2_K) {
        set(GgmlType::Q3_K, "attn_output, Q2_K");
      } else if (ft == kQ3_K_M) {
        set(GgmlType::Q4_K, "attn_output, Q3_K_M");
      } else if (ft == kQ3_K_L) {
        set(GgmlType::Q5_K, "attn_output, Q3_K_L");
      }
    }
    return type;
  }

  const ModelFacts& m_;
  const QuantizeOptions& opt_;
  int64_t i_attention_wv_ = 0;
  int64_t i_ffn_down_ = 0;
};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

// llama-quantize's tensor_allows_quantization, inverted to say why.
const char* why_not_quantizable(const TensorInfo& t, bool leave_output) {
  if (effective_n_dims(t.ne) < 2) return "1-D, kept";
  const std::string& n = t.name;
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return "not a weight, kept";
  if (contains(n, "_norm.weight")) return "norm, kept";
  if (leave_output && n == "output.weight") return "--leave-output-tensor";
  static const char* const kExcluded[] = {"ffn_gate_inp.weight",
                                          "ffn_gate_tid2eid.weight",
                                          "altup",
                                          "laurel",
                                          "per_layer_model_proj",
                                          "ssm_conv1d",
                                          "shortconv.conv.weight",
                                          "indexer.k_proj.weight",
                                          "indexer.q_proj.weight",
                                          "time_mix_first.weight",
                                          "time_mix_w0.weight",
                                          "time_mix_w1.weight",
                                          "time_mix_w2.weight",
                                          "time_mix_v0.weight",
                                          "time_mix_v1.weight",
                                          "time_mix_v2.weight",
                                          "time_mix_a0.weight",
                                          "time_mix_a1.weight",
                                          "time_mix_a2.weight",
                                          "time_mix_g1.weight",
                                          "time_mix_g2.weight",
                                          "time_mix_decay_w1.weight",
                                          "time_mix_decay_w2.weight",
                                          "time_mix_lerp_fused.weight",
                                          "attn_rel_b.weight",
                                          ".position_embd",
                                          "sam.pos_embd",
                                          "sam.neck.",
                                          "sam.net_",
                                          ".rel_pos",
                                          ".patch_embd",
                                          ".patch_merger",
                                          "a.rvq.codebook",
                                          "mm.a.code_embd"};
  for (const char* e : kExcluded) {
    if (contains(n, e)) return "excluded by llama-quantize, kept";
  }
  if (n == "position_embd.weight" || n == "token_types.weight") return "excluded by llama-quantize, kept";
  return nullptr;
}

Expected<QuantizeTarget> parse_quantize_target(const std::string& text) {
  struct Known {
    const char* name;
    uint32_t ftype;
    GgmlType type;
  };
  static const Known kKnown[] = {
      {"Q8_0", kQ8_0, GgmlType::Q8_0},       {"Q4_0", kQ4_0, GgmlType::Q4_0},
      {"Q4_1", kQ4_1, GgmlType::Q4_1},       {"Q5_0", kQ5_0, GgmlType::Q5_0},
      {"Q5_1", kQ5_1, GgmlType::Q5_1},       {"Q2_K", kQ2_K, GgmlType::Q2_K},
      {"Q2_K_S", kQ2_K_S, GgmlType::Q2_K},   {"Q3_K", kQ3_K_M, GgmlType::Q3_K},
      {"Q3_K_M", kQ3_K_M, GgmlType::Q3_K},   {"Q3_K_S", kQ3_K_S, GgmlType::Q3_K},
      {"Q3_K_L", kQ3_K_L, GgmlType::Q3_K},   {"Q4_K", kQ4_K_M, GgmlType::Q4_K},
      {"Q4_K_M", kQ4_K_M, GgmlType::Q4_K},   {"Q4_K_S", kQ4_K_S, GgmlType::Q4_K},
      {"Q5_K", kQ5_K_M, GgmlType::Q5_K},     {"Q5_K_M", kQ5_K_M, GgmlType::Q5_K},
      {"Q5_K_S", kQ5_K_S, GgmlType::Q5_K},   {"Q6_K", kQ6_K, GgmlType::Q6_K},
      {"IQ4_NL", kIQ4_NL, GgmlType::IQ4_NL}, {"IQ4_XS", kIQ4_XS, GgmlType::IQ4_XS},
      {"F16", kF16, GgmlType::F16},          {"BF16", kBF16, GgmlType::BF16},
      {"F32", kF32, GgmlType::F32},          {"MXFP4_MOE", kMXFP4_MOE, GgmlType::MXFP4},
  };
  const std::string u = upper(text);
  uint32_t number = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  const bool is_number = ec == std::errc() && p == text.data() + text.size();
  for (const Known& k : kKnown) {
    if (u == k.name || (is_number && number == k.ftype)) return QuantizeTarget{k.name, k.ftype, k.type};
  }
  return invalid_argument(
      "unknown quantization type '", text,
      "' (supported: Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q2_K_S Q3_K Q3_K_S Q3_K_M Q3_K_L Q4_K Q4_K_S Q4_K_M "
      "Q5_K Q5_K_S Q5_K_M Q6_K IQ4_NL "
      "IQ4_XS MXFP4_MOE F16 BF16 F32)");
}

Expected<TensorTypeOverride> parse_tensor_type_override(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return invalid_argument("--tensor-type '", text, "' is not PATTERN=TYPE");
  }
  std::string pattern = text.substr(0, eq);
  for (char& c : pattern) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto type = type_from_name(text.substr(eq + 1));
  if (!type) return invalid_argument("--tensor-type '", text, "': unknown type '", text.substr(eq + 1), "'");
  try {
    return TensorTypeOverride{pattern, std::regex(pattern), *type};
  } catch (const std::regex_error& e) {
    return invalid_argument("--tensor-type '", text, "': bad regular expression: ", e.what());
  }
}

bool requires_imatrix(const std::string& name, GgmlType to, uint32_t file_type) {
  const Category c = category_of(name);
  return to == GgmlType::Q2_K && file_type == kQ2_K_S && c != Category::kTokenEmbd && c != Category::kOutput;
}

bool llama_tensor_order_less(const std::string& a, const std::string& b) {
  const int64_t la = block_index(a).value_or(-1), lb = block_index(b).value_or(-1);
  if (la != lb) return la < lb;
  return std::strcmp(a.c_str(), b.c_str()) < 0;
}

Expected<QuantizePlan> plan_quantization(const GgufFile& input, const QuantizeOptions& options) {
  std::vector<const TensorInfo*> order;
  for (const TensorInfo& t : input.tensors()) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return llama_tensor_order_less(a->name, b->name);
  });
  const ModelFacts facts = model_facts(input);
  Planner planner(facts, options);
  QuantizePlan plan;
  for (const TensorInfo* t : order) {
    TensorPlan p;
    p.tensor = t;
    MTP_ASSIGN_OR_RETURN(p.to, planner.decide(*t, &p.reason));
    if (p.to != t->type && !is_quantize_supported(p.to)) {
      return unsupported("tensor '", t->name, "' would become ", type_name(p.to),
                         ", which mtp.cpp cannot write");
    }
    if (p.to != t->type && !type_traits(t->type).computable) {
      return unsupported("tensor '", t->name, "' is ", type_name(t->type),
                         ", which mtp.cpp cannot read to convert; keep it with --keep");
    }
    auto bytes = tensor_byte_size(p.to, t->ne);
    if (!bytes.ok()) return bytes.status().with_context("tensor '" + t->name + "'");
    p.out_bytes = *bytes;
    plan.in_bytes += t->n_bytes;
    plan.out_bytes += p.out_bytes;
    plan.tensors.push_back(std::move(p));
  }
  return plan;
}

}  // namespace mtp::surgery
