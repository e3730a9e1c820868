#include "loadgen/live_history.h"

#include <map>

namespace mtp::loadgen {
namespace {

bool is_assistant(const Json& m) {
  return m.is_object() && m.value("role", Json()) == "assistant";
}

bool has_assistant(const Json& messages) {
  for (const Json& m : messages)
    if (is_assistant(m)) return true;
  return false;
}

// Whether `messages` begins with every message of `prefix`, equal as JSON.
bool starts_with(const Json& messages, const Json& prefix) {
  if (!messages.is_array() || !prefix.is_array() || prefix.size() > messages.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (messages[i] != prefix[i]) return false;
  return true;
}

// The ids of the recorded replies' tool calls mapped to the live reply's, position by position (a live reply
// with fewer calls leaves the rest as recorded).
std::map<std::string, std::string> call_id_map(const Json& recorded_replies, const Json& live_calls) {
  std::map<std::string, std::string> ids;
  size_t k = 0;
  for (const Json& m : recorded_replies) {
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (const Json& c : *calls) {
      if (k >= live_calls.size()) return ids;
      const std::string live_id = live_calls[k++].value("id", "");
      if (c.is_object() && c.contains("id") && c["id"].is_string() && !live_id.empty())
        ids[c["id"].get<std::string>()] = live_id;
    }
  }
  return ids;
}

}  // namespace

Json assistant_message(const Reply& reply, bool with_reasoning) {
  Json m = {{"role", "assistant"}, {"content", reply.content}};
  if (with_reasoning && !reply.reasoning.empty()) m["reasoning_content"] = reply.reasoning;
  if (!reply.tool_calls.empty()) m["tool_calls"] = reply.tool_calls;
  return m;
}

TurnMessages next_turn(const LiveSession& session, const Json& recorded) {
  const bool restart =
      session.recorded.is_null() || !session.reply || !starts_with(recorded, session.recorded);
  if (restart) return {recorded, !has_assistant(recorded)};
  // recorded = previous turn's messages, the recorded reply (assistant messages), the turn's new messages.
  size_t i = session.recorded.size();
  Json replaced = Json::array();
  while (i < recorded.size() && is_assistant(recorded[i])) replaced.push_back(recorded[i++]);
  TurnMessages out{session.sent, session.all_live};
  if (!replaced.empty()) {
    // Reasoning goes back only where the recorded client sent its own back.
    bool with_reasoning = false;
    for (const Json& m : replaced) with_reasoning |= m.contains("reasoning_content");
    out.messages.push_back(assistant_message(*session.reply, with_reasoning));
  }
  const auto ids = call_id_map(replaced, session.reply->tool_calls);
  for (; i < recorded.size(); ++i) {
    Json m = recorded[i];
    if (is_assistant(m)) out.live = false;  // a recorded reply not at the turn's start stays as it is
    if (auto id = m.find("tool_call_id"); id != m.end() && id->is_string())
      if (auto live = ids.find(id->get<std::string>()); live != ids.end()) *id = live->second;
    out.messages.push_back(std::move(m));
  }
  return out;
}

Json recorded_turn(const RecordedSession& session, const Json& recorded) {
  const size_t k = session.recorded.is_array() ? session.recorded.size() : 0;
  if (!is_assistant(session.answer) || !starts_with(recorded, session.recorded) || k >= recorded.size() ||
      is_assistant(recorded[k]))
    return recorded;
  Json out = session.sent;
  out.push_back(session.answer);
  for (size_t i = k; i < recorded.size(); ++i) out.push_back(recorded[i]);
  return out;
}

void finish_turn(LiveSession& session, const Json& recorded, const TurnMessages& sent,
                 std::optional<Reply> reply) {
  session.recorded = recorded;
  session.sent = sent.messages;
  session.all_live = sent.live;
  session.reply = std::move(reply);
}

}  // namespace mtp::loadgen
