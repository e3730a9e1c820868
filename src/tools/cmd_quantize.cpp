// `mtp quantize IN OUT --type T`: requantize a model with llama-quantize's per-tensor policy.
#include <sys/resource.h>

#include <cstdio>

#include "base/log.h"
#include "command.h"
#include "surgery/quantize.h"

namespace mtp::tools {
using namespace mtp::surgery;  // this command is a front end of the surgery library
namespace {

struct QuantizeArgs {
  std::string input, output, type, output_type, token_embedding_type, imatrix;
  std::string type_positional;  // llama-quantize's third positional, the same as --type
  std::vector<std::string> keep, tensor_types;
  bool pure = false, leave_output = false, dry_run = false;
  int threads = 0;
};

Expected<QuantizeOptions> build_options(const QuantizeArgs& a) {
  QuantizeOptions o;
  MTP_ASSIGN_OR_RETURN(o.target, parse_quantize_target(a.type));
  o.keep = a.keep;
  for (const std::string& t : a.tensor_types) {
    MTP_ASSIGN_OR_RETURN(TensorTypeOverride ov, parse_tensor_type_override(t));
    o.tensor_types.push_back(std::move(ov));
  }
  auto parse_type = [](const std::string& s, const char* flag) -> Expected<GgmlType> {
    auto t = type_from_name(s);
    if (!t) return invalid_argument(flag, ": unknown type '", s, "'");
    return *t;
  };
  if (!a.output_type.empty()) {
    MTP_ASSIGN_OR_RETURN(GgmlType t, parse_type(a.output_type, "--output-tensor-type"));
    o.output_type = t;
  }
  if (!a.token_embedding_type.empty()) {
    MTP_ASSIGN_OR_RETURN(GgmlType t, parse_type(a.token_embedding_type, "--token-embedding-type"));
    o.token_embedding_type = t;
  }
  o.pure = a.pure;
  o.leave_output = a.leave_output;
  o.has_imatrix = !a.imatrix.empty();
  return o;
}

void print_plan(const QuantizePlan& plan) {
  std::printf("%-44s %-8s %-8s %-20s %12s %12s  %s\n", "tensor", "from", "to", "shape", "in bytes",
              "out bytes", "why");
  for (const TensorPlan& p : plan.tensors) {
    std::printf("%-44s %-8s %-8s %-20s %12llu %12llu  %s\n", p.tensor->name.c_str(),
                std::string(type_name(p.tensor->type)).c_str(), std::string(type_name(p.to)).c_str(),
                p.tensor->shape_string().c_str(), static_cast<unsigned long long>(p.tensor->n_bytes),
                static_cast<unsigned long long>(p.out_bytes), p.reason.c_str());
  }
  std::printf("total: %zu tensors, %.3f GB -> %.3f GB (decimal)\n", plan.tensors.size(), plan.in_bytes / 1e9,
              plan.out_bytes / 1e9);
}

}  // namespace

CommandRunner register_quantize(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand("quantize", "Requantize a GGUF with llama-quantize's per-tensor policy");
  cmd->add_option("input", a->input, "Input GGUF")->required();
  cmd->add_option("output", a->output, "Output GGUF (written to a temporary file, renamed when complete)")
      ->required();
  cmd->add_option("type", a->type_positional, "The target type as llama-quantize takes it (or --type)");
  cmd->add_option("--type", a->type,
                  "Target (required, here or as the third positional): Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K(_S) "
                  "Q3_K(_S/_M/_L) Q4_K(_S/_M) Q5_K(_S/_M) "
                  "Q6_K IQ4_NL IQ4_XS MXFP4_MOE F16 BF16 F32, or an ftype number");
  cmd->add_option("--keep", a->keep,
                  "Copy tensors matching this glob unchanged (e.g. 'blk.40.*'); repeatable");
  cmd->add_option("--tensor-type", a->tensor_types, "PATTERN=TYPE (regex, first match wins); repeatable");
  cmd->add_option("--output-tensor-type", a->output_type, "Type of output.weight");
  cmd->add_option("--token-embedding-type", a->token_embedding_type, "Type of token_embd.weight");
  cmd->add_option("--imatrix", a->imatrix, "Importance matrix (GGUF or legacy .dat)");
  cmd->add_flag("--pure", a->pure, "No mixture rules: every quantizable tensor gets the target type");
  cmd->add_flag("--leave-output-tensor", a->leave_output, "Keep output.weight as it is");
  cmd->add_flag("--dry-run", a->dry_run,
                "Print each tensor's old and new type and the resulting size; write nothing");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  return [a] {
    if (!a->type.empty() && !a->type_positional.empty())
      return report_error("quantize", invalid_argument("the target type is given twice (--type and a third "
                                                       "positional); give it once"));
    if (a->type.empty()) a->type = a->type_positional;
    if (a->type.empty()) return report_error("quantize", invalid_argument("--type is required"));
    auto options = build_options(*a);
    if (!options.ok()) return report_error("quantize", options.status());
    Imatrix imatrix;  // loaded (and checked) for a dry run too
    if (!a->imatrix.empty()) {
      auto m = load_imatrix(a->imatrix);
      if (!m.ok()) return report_error("quantize", m.status());
      imatrix = std::move(*m);
    }
    if (a->dry_run) {
      auto input = GgufFile::open(a->input);
      if (!input.ok()) return report_error("quantize", input.status());
      auto plan = plan_quantization(*input, *options);
      if (!plan.ok()) return report_error("quantize", plan.status().with_context(a->input));
      print_plan(*plan);
      return kExitOk;
    }
    ThreadPool pool(a->threads);
    auto r = quantize_file(a->input, a->output, *options, a->imatrix.empty() ? nullptr : &imatrix, a->imatrix,
                           pool);
    if (!r.ok()) return report_error("quantize", r.status());
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::fprintf(
        stderr,
        "mtp quantize: %s -> %s (%s): %.3f GB -> %.3f GB in %.1f s (%.2f GB/s of input), %d threads, "
        "peak RSS %.0f MB\n",
        a->input.c_str(), a->output.c_str(), options->target.name.c_str(), r->plan.in_bytes / 1e9,
        r->plan.out_bytes / 1e9, r->seconds, r->plan.in_bytes / 1e9 / std::max(r->seconds, 1e-9), pool.size(),
        ru.ru_maxrss / 1024.0);
    return kExitOk;
  };
}

}  // namespace mtp::tools
