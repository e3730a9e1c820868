// The chat page GET / serves (page.html, embedded at build time by embed_text.cmake): a streamed reply with
// each token coloured by how it came (accepted draft or the trunk's own), live tokens/s and acceptance per
// draft position. It talks to the server's own /props and /v1/chat/completions (with "return_token_sources").
#pragma once

#include <string_view>

namespace mtp::server {

std::string_view chat_page();  // the whole HTML document

}  // namespace mtp::server
