// Multi-turn replay with the server's live replies (`mtp replay --history live`, docs/bench.md): a session's
// next turn is sent with the messages sent for its previous turn, then the server's actual reply to it, then
// the new messages the trace records for the turn, instead of the recorded history.
#pragma once

#include <optional>
#include <string>

#include "loadgen/record.h"
#include "loadgen/stream_client.h"

namespace mtp::loadgen {

// The assistant message a reply stands for: {"role": "assistant", "content": TEXT}, with "tool_calls" when
// it made any and "reasoning_content" when `with_reasoning` and it had reasoning.
Json assistant_message(const Reply& reply, bool with_reasoning);

// What one session has sent and received so far.
struct LiveSession {
  Json recorded;  // the previous turn's messages as the trace records them; null before the first
  Json sent;      // the messages sent for the previous turn (before any cache tag)
  std::optional<Reply> reply;  // the server's reply to it; none when the turn failed
  bool all_live = true;        // every assistant message in `sent` was the server's own reply
};

// The messages of a turn and where its history came from.
struct TurnMessages {
  Json messages;
  bool live = true;  // every assistant message in `messages` is the server's own reply
};

// The messages to send for a turn whose recorded messages are `recorded`. When they start with the previous
// turn's recorded messages, the assistant messages that follow (the recorded reply) give way to the live
// reply, with the tool_call_id of later tool messages mapped to the live calls' ids in order; the rest is
// sent as recorded. When they do not (a client that rewrote its history), or the previous turn failed, the
// recorded messages are sent as they are. The first turn is sent as recorded.
TurnMessages next_turn(const LiveSession& session, const Json& recorded);

// `--history recorded` on a trace with recorded answers: a session's previous turn as recorded and as sent,
// and the answer it recorded.
struct RecordedSession {
  Json recorded;  // null before the first turn
  Json sent;
  Json answer;
};

// The messages to send for a turn whose recorded messages are `recorded`. Where they continue the previous
// turn's recorded messages with new messages but without an assistant reply (a client that did not send the
// reply back), the previous turn's recorded answer goes in as that reply, after what was sent for it;
// otherwise (the reply is there, the history was rewritten, no answer was recorded) they are sent as they
// are.
Json recorded_turn(const RecordedSession& session, const Json& recorded);

// Records what a turn sent and got back (`reply`: none when it failed), for the session's next turn.
void finish_turn(LiveSession& session, const Json& recorded, const TurnMessages& sent,
                 std::optional<Reply> reply);

}  // namespace mtp::loadgen
