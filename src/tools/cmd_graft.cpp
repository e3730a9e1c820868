// `mtp graft` and `mtp extract-head`: move an MTP block between GGUF files (see graft.h).
#include <cstdio>

#include "base/log.h"
#include "base/timer.h"
#include "command.h"
#include "surgery/graft.h"

namespace mtp::tools {
using namespace mtp::surgery;  // this command is a front end of the surgery library

CommandRunner register_graft(CLI::App& app) {
  struct Args {
    std::string trunk, head, output, head_type;
    GraftOptions options;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("graft", "Attach the MTP block of a model (or head-only file) to a trunk");
  cmd->add_option("--trunk", a->trunk, "The model that receives the head")->required();
  cmd->add_option("--head", a->head, "A model with an MTP block, or a head-only file from extract-head")
      ->required();
  cmd->add_option("-o,--output", a->output, "Output GGUF")->required();
  cmd->add_option("--head-type", a->head_type, "Convert the head's weight matrices to this type (e.g. q8_0)");
  cmd->add_flag("--replace", a->options.replace, "Replace an MTP block the trunk already has");
  cmd->add_flag("--force", a->options.force,
                "Graft despite tokenizer or RoPE differences (shape checks stay)");
  cmd->add_flag("--with-embeddings", a->options.with_embeddings,
                "Give the block its own copy of the head source's token_embd/output (nextn.embed_tokens, "
                "nextn.shared_head_head)");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  return [a] {
    if (!a->head_type.empty()) {
      auto t = type_from_name(a->head_type);
      if (!t)
        return report_error("graft", invalid_argument("--head-type: unknown type '", a->head_type, "'"));
      // Refused rather than quietly replaced by another type.
      if (!type_traits(*t).computable)
        return report_error(
            "graft",
            invalid_argument(
                "--head-type: mtp cannot write ", a->head_type,
                " (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_K q3_K q4_K q5_K q6_K iq4_nl iq4_xs mxfp4)"));
      a->options.head_type = *t;
    }
    ThreadPool pool(a->threads);
    Timer timer;
    auto r = graft(a->trunk, a->head, a->output, a->options, pool);
    if (!r.ok()) return report_error("graft", r.status());
    for (const auto& w : r->warnings) log_warn("graft: overridden by --force: ", w);
    for (const auto& f : r->type_fallbacks) log_warn("graft: --head-type fallback: ", f);
    std::fprintf(stderr, "mtp graft: wrote %s: MTP block blk.%lld (%zu tensors), %.3f GB in %.1f s\n",
                 a->output.c_str(), static_cast<long long>(r->block), r->head_tensors, r->bytes_written / 1e9,
                 timer.seconds());
    return kExitOk;
  };
}

CommandRunner register_extract_head(CLI::App& app) {
  struct Args {
    std::string input, output;
    bool with_embeddings = false;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("extract-head", "Write a model's MTP block as a head-only GGUF");
  cmd->add_option("input", a->input, "A model with an MTP block")->required();
  cmd->add_option("-o,--output", a->output, "Output head-only GGUF")->required();
  cmd->add_flag(
      "--with-embeddings", a->with_embeddings,
      "Also carry the model's token_embd/output as the block's own nextn.embed_tokens/shared_head_head");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  return [a] {
    ThreadPool pool(a->threads);
    Timer timer;
    auto r = extract_head(a->input, a->output, a->with_embeddings, pool);
    if (!r.ok()) return report_error("extract-head", r.status());
    std::fprintf(stderr, "mtp extract-head: wrote %s: blk.%lld (%zu tensors), %.3f GB in %.1f s\n",
                 a->output.c_str(), static_cast<long long>(r->block), r->head_tensors, r->bytes_written / 1e9,
                 timer.seconds());
    return kExitOk;
  };
}

}  // namespace mtp::tools
