// The requests `mtp replay` sends, read from a trace file (docs/bench.md, "Trace formats"): our own trace
// (what `mtp serve --record` writes), ShareGPT JSON, the length-only public traces (Mooncake JSONL, the
// Azure LLM inference CSV, BurstGPT CSV), whose prompts are synthesized at the recorded lengths, and other
// tools' datasets (vLLM's custom JSONL, SGLang's agentic multi-turn trace).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "loadgen/record.h"

namespace mtp::loadgen {

// One request of a trace. Lengths are tokens: recorded by the server (our trace), given by the trace
// (Mooncake, Azure, BurstGPT), or estimated from characters (ShareGPT: ceil(chars / 4)).
struct TraceRequest {
  std::string source;           // "PATH:LINE" (ShareGPT: "PATH: entry N turn K") for messages about it
  double arrival_s = -1;        // since the trace's first request; -1: the trace has no times
  std::string session;          // turns of one session are sent in order, one at a time; "": its own session
  std::string category;         // our trace's optional "category" tag (e.g. "chat", "code"); "": none
  bool completions = false;     // POST /v1/completions with `prompt` instead of chat messages
  bool synthetic = false;       // no text: `prompt_tokens` words are made up (loadgen/prompts.h)
  Json messages;                // chat messages as recorded (null when synthetic or completions)
  std::string prompt;           // completions prompt text
  Json extra = Json::object();  // body fields sent as recorded: tools, sampling parameters
  int64_t prompt_tokens = -1;   // -1: unknown
  int64_t output_tokens = -1;   // the recorded output length; -1: unknown (the cap is sent)
  std::vector<int64_t> hash_ids;  // Mooncake: 512-token blocks; equal ids are equal prompt prefixes
  // A redacted chat line's messages as (role, characters): synthetic messages of the same roles share the
  // prompt length in proportion to the characters. Empty: one user message.
  std::vector<std::pair<std::string, int64_t>> shape;
  // Our trace recorded with `mtp serve --record-answers`: the server's answer (chat: the assistant message;
  // completions: {"text"}); null when not recorded.
  Json answer;
};

// Lines (or turns) of an imported dataset that could not be read and were left out: how many, and the first
// with its place and reason ("PATH:LINE: why").
struct TraceSkips {
  int64_t count = 0;
  std::string first;
};

// The names --format takes besides "auto".
const std::vector<std::string>& trace_formats();

// The format of a file from its name and first line: .csv by its header (Azure or BurstGPT), a JSON array
// ShareGPT, a JSON object with "conversations" SGLang's agentic trace, JSONL by the first line's keys
// (Mooncake: input_length; ours: "type": "trace"; vLLM custom: "prompt"). An error says why not.
Expected<std::string> detect_trace_format(const std::string& path);

// Every request of the file in arrival order (file order where there are no times). A malformed line fails
// with "PATH:LINE: why", except in the imported formats (vllm-custom, sglang-agentic), where it is left out
// and counted in `skips`; `format` is one of trace_formats() or "auto".
Expected<std::vector<TraceRequest>> read_trace(const std::string& path, const std::string& format,
                                               TraceSkips* skips = nullptr);

// Parsers of each format, on the file's text (`path` only names it in errors).
Expected<std::vector<TraceRequest>> parse_mtp_trace(const std::string& path, const std::string& text);
Expected<std::vector<TraceRequest>> parse_sharegpt(const std::string& path, const std::string& text);
Expected<std::vector<TraceRequest>> parse_mooncake(const std::string& path, const std::string& text);
Expected<std::vector<TraceRequest>> parse_azure_csv(const std::string& path, const std::string& text);
Expected<std::vector<TraceRequest>> parse_burstgpt_csv(const std::string& path, const std::string& text);
// vLLM's `--dataset-name custom`: {"prompt": TEXT, "output_tokens"?: N} per line, one user message each.
Expected<std::vector<TraceRequest>> parse_vllm_custom(const std::string& path, const std::string& text,
                                                      TraceSkips* skips);
// SGLang's agentic trace: {"conversations": [[{"messages": [...], "prompt_tokens"?}, ...], ...]}, each turn
// holding only its new (non-assistant) messages; one session per conversation, one request per turn.
Expected<std::vector<TraceRequest>> parse_sglang_agentic(const std::string& path, const std::string& text,
                                                         TraceSkips* skips);

}  // namespace mtp::loadgen
