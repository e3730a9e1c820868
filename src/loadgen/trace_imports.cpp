// Benchmark datasets of other tools read as traces (trace.h): vLLM's `--dataset-name custom` JSONL and
// SGLang's agentic multi-turn trace. Unlike our own formats, a malformed line or turn is skipped and
// counted (TraceSkips), not fatal: these files are often assembled by hand or by scripts, and one bad line
// should not stop a replay of thousands.
#include "loadgen/prompts.h"
#include "loadgen/trace.h"
#include "trace_util.h"

namespace mtp::loadgen {
namespace {

// The assistant reply SGLang's agentic loader asks for when no output length is given (its default: the
// average reply of OpenHands-style traces); we send it as max_tokens and put a synthetic reply of that many
// words between turns, since the trace records no replies (`--history live` puts the server's own there).
constexpr int kAgenticReplyTokens = 220;

void skip(TraceSkips* skips, const std::string& where, const std::string& why) {
  if (skips == nullptr) return;
  if (skips->count++ == 0) skips->first = where + ": " + why;
}

// One vLLM custom line: {"prompt": TEXT, "output_tokens"?: N}; "" or why it is skipped.
std::string read_custom_line(const Json& j, TraceRequest& r) {
  if (!j.is_object()) return "not a JSON object";
  auto prompt = j.find("prompt");
  if (prompt == j.end() || !prompt->is_string() || prompt->get<std::string>().empty())
    return "no non-empty string \"prompt\"";
  if (auto out = j.find("output_tokens"); out != j.end() && !out->is_null()) {
    if (std::string why = trace_detail::int_field(j, "output_tokens", 1, r.output_tokens); !why.empty())
      return why;
  }
  const std::string text = prompt->get<std::string>();
  r.messages = Json::array({Json{{"role", "user"}, {"content", text}}});
  r.prompt_tokens = trace_detail::estimate_tokens(text);
  return "";
}

// The new messages of one agentic turn; "" or why the turn is skipped.
std::string read_agentic_turn(const Json& turn, Json& messages, int64_t& prompt_tokens) {
  if (!turn.is_object()) return "not an object";
  auto m = turn.find("messages");
  if (m == turn.end() || !m->is_array() || m->empty()) return "no non-empty \"messages\" array";
  for (const Json& msg : *m)
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      return "a message without a string \"role\"";
  messages = *m;
  prompt_tokens = -1;
  if (auto p = turn.find("prompt_tokens"); p != turn.end() && p->is_number_integer())
    prompt_tokens = p->get<int64_t>();
  return "";
}

// The requests of one conversation: one per usable turn, each with every earlier turn's messages and a
// synthetic assistant reply after each earlier turn as its history.
void read_agentic_conversation(const Json& conv, const std::string& where, std::vector<TraceRequest>& out,
                               TraceSkips* skips) {
  if (!conv.is_array()) return skip(skips, where, "a conversation is not an array of turns");
  Json history = Json::array();
  for (size_t k = 0; k < conv.size(); ++k) {
    const std::string turn_where = str_cat(where, " turn ", k + 1);
    Json messages;
    int64_t prompt_tokens = -1;
    if (std::string why = read_agentic_turn(conv[k], messages, prompt_tokens); !why.empty()) {
      skip(skips, turn_where, why);
      continue;
    }
    if (!out.empty() && out.back().session == where) {
      const int64_t reply_id = static_cast<int64_t>(out.size()) - 1;
      history.push_back(
          Json{{"role", "assistant"}, {"content", synthetic_prompt(0, reply_id, kAgenticReplyTokens)}});
    }
    for (const Json& m : messages) history.push_back(m);
    TraceRequest r;
    r.source = turn_where;
    r.session = where;
    r.messages = history;
    r.output_tokens = kAgenticReplyTokens;
    r.prompt_tokens = prompt_tokens;
    if (r.prompt_tokens < 0) {
      r.prompt_tokens = 0;
      for (const Json& m : history)
        if (m.contains("content") && m["content"].is_string())
          r.prompt_tokens += trace_detail::estimate_tokens(m["content"].get<std::string>());
    }
    out.push_back(std::move(r));
  }
}

}  // namespace

Expected<std::vector<TraceRequest>> parse_vllm_custom(const std::string& path, const std::string& text,
                                                      TraceSkips* skips) {
  std::vector<TraceRequest> out;
  const Status s = trace_detail::for_each_line(text, [&](int64_t n, std::string_view line) {
    const Json j = Json::parse(line, nullptr, false);
    TraceRequest r;
    r.source = str_cat(path, ":", n);
    const std::string why = j.is_discarded() ? "not JSON" : read_custom_line(j, r);
    if (why.empty()) {
      out.push_back(std::move(r));
    } else {
      skip(skips, r.source, why);
    }
    return Status::Ok();
  });
  MTP_RETURN_IF_ERROR(s);
  return out;
}

Expected<std::vector<TraceRequest>> parse_sglang_agentic(const std::string& path, const std::string& text,
                                                         TraceSkips* skips) {
  const Json doc = Json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return corrupt(path, ": not a JSON object (SGLang's agentic trace is {\"conversations\": [...]})");
  auto convs = doc.find("conversations");
  if (convs == doc.end() || !convs->is_array()) return corrupt(path, ": no \"conversations\" array");
  std::vector<TraceRequest> out;
  for (size_t i = 0; i < convs->size(); ++i)
    read_agentic_conversation((*convs)[i], str_cat(path, ": conversation ", i + 1), out, skips);
  return out;
}

}  // namespace mtp::loadgen
