// llama-server's native API beside the OpenAI one, for the tools that speak it: POST /completion's response
// object and stream chunks, GET /slots, and llama-server's names in GET /props. Requests are parsed by
// parse_native_completion_request (api.h) and run through the same path as /v1/completions (server.cpp);
// only the shape of the answer differs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/api.h"
#include "server/engine_loop.h"
#include "server/format.h"
#include "tokenizer/tokenizer.h"

namespace mtp::server {

// llama-server's "generation_settings" / "params": the sampling settings of a request (`n_predict` is what
// it may generate, -1 for no limit; `seed` -1 for a random one).
Json generation_params_json(const RequestOptions& options, int64_t n_predict, int64_t seed,
                            const std::vector<std::string>& stop);

// POST /completion: {"content", "tokens", "stop", "stop_type", "stopping_word", "tokens_predicted",
// "tokens_evaluated", "tokens_cached", "truncated", "generation_settings", "timings", ...}; streamed, one
// {"content", "tokens", "stop": false, ...} event per update and a last one with "stop": true and the rest.
class NativeResponseBuilder final : public ResponseFormatter {
 public:
  NativeResponseBuilder(const GenerationParams& params, const Tokenizer& tokenizer, std::string model,
                        int64_t n_prompt, int64_t n_ctx);

  std::vector<Json> chunks(const Update& u) override;
  bool ends_with_done() const override { return false; }
  void add(const Update& u) override;
  Json result() const override;
  std::string finish_reason() const override { return reason_ == "length" ? "length" : "stop"; }
  int64_t completion_tokens() const override { return n_generated_; }
  Json answer() const override { return Json{{"text", text_}}; }
  const std::vector<std::string>& warnings() const override { return warnings_; }

 private:
  void count(const Update& u);
  // The "stop": true object; in a stream its content and tokens were sent already.
  Json final_json(bool stream) const;
  Json probabilities_json(const std::vector<GeneratedToken>& tokens) const;
  // "eos" (an end token), "limit" (n_predict or the context), "word" (a stop string), "none".
  std::string stop_type() const;

  const GenerationParams& params_;
  const Tokenizer& tokenizer_;
  std::string model_;
  int64_t n_prompt_;
  int64_t n_ctx_;
  std::string text_;
  std::vector<int32_t> token_ids_;
  Json probabilities_ = Json::array();
  bool has_new_line_ = false;
  int64_t n_generated_ = 0;
  std::string reason_;
  std::string stop_word_;
  RequestTimings timings_;
  std::vector<std::string> warnings_;  // none: kept for the interface
};

// GET /slots: one object per slot (`n_ctx` is the context all slots share).
Json slots_json(const std::vector<SlotInfo>& slots, int64_t n_ctx);

// GET /props: llama-server's names beside ours (default_generation_settings.n_ctx and .params,
// modalities); the fields already there are kept.
void add_llama_props(Json& props, const RequestDefaults& defaults);

}  // namespace mtp::server
