// `mtp synth`: write a deterministic random-weight qwen35moe model (see synth.h for how values are chosen).
#include <cstdio>

#include "base/log.h"
#include "base/timer.h"
#include "command.h"
#include "surgery/synth.h"

namespace mtp::tools {
using namespace mtp::surgery;  // this command is a front end of the surgery library

CommandRunner register_synth(CLI::App& app) {
  struct Args {
    SynthOptions opt;
    std::string type = "f32";
    std::string out;
    int threads = 0;
    std::optional<double> structured;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("synth", "Write a deterministic random-weight qwen35moe GGUF (test fixtures)");
  cmd->add_option("--shape", a->opt.shape,
                  "Named shape: tiny (a few MB), small (256 wide, 4 layers), code (128 wide, 2048-token "
                  "vocabulary) or "
                  "35b-a3b (the real widths)")
      ->capture_default_str();
  cmd->add_option("--layers", a->opt.layers, "Trunk layers (default: the shape's own; 35b-a3b has 40)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_flag("--mtp", a->opt.mtp, "Append the MTP block blk.{layers} and set nextn_predict_layers = 1");
  cmd->add_option("--type", a->type,
                  "Type of the weight matrices: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_K q3_K q4_K q5_K "
                  "q6_K iq4_nl iq4_xs mxfp4")
      ->capture_default_str();
  cmd->add_option("--seed", a->opt.seed, "Random seed; the same seed gives the same bytes")
      ->capture_default_str();
  cmd->add_option("--name", a->opt.name, "general.name (default synth-<shape>)");
  cmd->add_option(
         "--structured", a->structured,
         "Follow a hidden token chain so the MTP head agrees with the trunk; NOISE 0 = always, larger = less")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  cmd->add_option("-o,--output", a->out, "Output GGUF path")->required();
  return [a] {
    auto type = type_from_name(a->type);
    if (!type) return report_error("synth", invalid_argument("unknown type '", a->type, "'"));
    a->opt.type = *type;
    a->opt.structured = a->structured;
    ThreadPool pool(a->threads);
    Timer timer;
    Status s = synth_model(a->opt, a->out, pool);
    // Messages from writing the file already start with its path.
    if (!s.ok()) return report_error("synth", s.message().rfind(a->out, 0) == 0 ? s : s.with_context(a->out));
    log_info("wrote ", a->out, " in ", timer.seconds(), " s");
    return kExitOk;
  };
}

}  // namespace mtp::tools
