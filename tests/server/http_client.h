// A small blocking HTTP/1.1 client over POSIX sockets for the server tests: whole requests, and streams read
// piece by piece (so that a test can read part of an SSE stream and then drop the connection). It decodes
// Content-Length and chunked bodies and keeps the raw bytes too, to check the framing itself.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mtp::testing {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // decoded (chunked framing removed)
  bool chunked = false;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class HttpConnection {
 public:
  // Connects to 127.0.0.1:port; throws when the connection is refused.
  explicit HttpConnection(int port, int timeout_ms = 60000) : timeout_ms_(timeout_ms) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
      throw std::runtime_error("connection refused on port " + std::to_string(port));
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~HttpConnection() { close(); }
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Sends a request (Connection: close). `body` empty and method GET: no body.
  void send(const std::string& method, const std::string& path, const std::string& body = "",
            const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
    for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
    if (method != "GET" || !body.empty()) {
      bool has_type = false;
      for (const auto& [k, v] : headers) has_type |= k == "Content-Type";
      if (!has_type) req += "Content-Type: application/json\r\n";
      req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    req += "\r\n" + body;
    send_raw(req);
  }
  void send_raw(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      off += static_cast<size_t>(n);
    }
  }

  // Reads the status line and headers.
  HttpResponse read_head() {
    HttpResponse r;
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) throw std::runtime_error("connection closed before the response headers: '" + buf_ + "'");
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    std::string status_line = head.substr(0, line_end);
    r.status = std::stoi(status_line.substr(status_line.find(' ') + 1, 3));
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string line = head.substr(pos, e - pos);
      size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[name] = value;
      pos = e + 2;
    }
    r.chunked = r.header("transfer-encoding") == "chunked";
    if (!r.chunked && !r.header("content-length").empty())
      remaining_ = std::stoll(r.header("content-length"));
    chunked_ = r.chunked;
    return r;
  }

  // The next piece of the decoded body (one chunk of a chunked body); "" at the end of the body.
  std::string read_body_piece() {
    if (done_) return "";
    if (!chunked_) {
      if (remaining_ == 0) return done_ = true, "";
      if (buf_.empty() && !fill()) return done_ = true, "";
      std::string out = remaining_ > 0 ? buf_.substr(0, static_cast<size_t>(remaining_)) : buf_;
      buf_.erase(0, out.size());
      if (remaining_ > 0) remaining_ -= static_cast<int64_t>(out.size());
      return out;
    }
    size_t e;
    while ((e = buf_.find("\r\n")) == std::string::npos)
      if (!fill()) throw std::runtime_error("chunked body cut short");
    const size_t size = std::stoul(buf_.substr(0, e), nullptr, 16);
    while (buf_.size() < e + 2 + size + 2)
      if (!fill()) throw std::runtime_error("chunk cut short");
    std::string out = buf_.substr(e + 2, size);
    if (buf_.substr(e + 2 + size, 2) != "\r\n") throw std::runtime_error("chunk not followed by CRLF");
    buf_.erase(0, e + 2 + size + 2);
    if (size == 0) done_ = true;
    return out;
  }

  std::string read_body() {
    std::string body, piece;
    while (!(piece = read_body_piece()).empty()) body += piece;
    return body;
  }

 private:
  bool fill() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms_) <= 0) throw std::runtime_error("timed out reading the response");
    char tmp[8192];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  int timeout_ms_;
  std::string buf_;
  int64_t remaining_ = -1;
  bool chunked_ = false;
  bool done_ = false;
};

inline HttpResponse http_request(int port, const std::string& method, const std::string& path,
                                 const std::string& body = "",
                                 const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  HttpConnection c(port);
  c.send(method, path, body, headers);
  HttpResponse r = c.read_head();
  r.body = c.read_body();
  return r;
}
inline HttpResponse http_post(int port, const std::string& path, const std::string& body,
                              const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  return http_request(port, "POST", path, body, headers);
}
inline HttpResponse http_get(int port, const std::string& path,
                             const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  return http_request(port, "GET", path, "", headers);
}

// The `data:` payloads of an SSE body, in order. Fails (throws) on anything but "data: ...\n\n" events.
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos)
      throw std::runtime_error("SSE event without a blank line: " + body.substr(pos));
    std::string ev = body.substr(pos, end - pos);
    if (ev.rfind("data: ", 0) != 0 || ev.find('\n') != std::string::npos)
      throw std::runtime_error("not a single-line data event: " + ev);
    out.push_back(ev.substr(6));
    pos = end + 2;
  }
  return out;
}

}  // namespace mtp::testing
