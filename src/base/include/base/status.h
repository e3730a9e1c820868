// Status and Expected<T>: how every fallible operation on files or network input reports failure.
// Invariants of the program itself use MTP_CHECK (check.h) instead.
#pragma once

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace mtp {

// Concatenates any streamable values into one string: str_cat("tensor '", name, "' at byte ", off).
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller (a user, a flag, a request) asked for something malformed
  kCorrupt,          // a file or message does not follow its format
  kNotFound,
  kIo,           // the operating system refused (open, read, write, rename, mmap)
  kUnsupported,  // valid input that this build does not handle
  kResourceExhausted,
  kInternal,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "<context>: <message>", for adding the file name or the field being
  // parsed.
  Status with_context(const std::string& context) const {
    if (ok()) return *this;
    return {code_, context + ": " + message_};
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status invalid_argument(const Args&... args) {
  return {StatusCode::kInvalidArgument, str_cat(args...)};
}
template <typename... Args>
Status corrupt(const Args&... args) {
  return {StatusCode::kCorrupt, str_cat(args...)};
}
template <typename... Args>
Status not_found(const Args&... args) {
  return {StatusCode::kNotFound, str_cat(args...)};
}
template <typename... Args>
Status io_error(const Args&... args) {
  return {StatusCode::kIo, str_cat(args...)};
}
template <typename... Args>
Status unsupported(const Args&... args) {
  return {StatusCode::kUnsupported, str_cat(args...)};
}

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Expected {
  static_assert(!std::is_same_v<T, Status>, "use Status directly");

 public:
  Expected(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Expected(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Expected built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }

  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  // The value, or `fallback` when there is none (the error is dropped: use only where it cannot matter).
  T value_or(T fallback) const& { return ok() ? std::get<T>(v_) : std::move(fallback); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace mtp

#define MTP_CONCAT_INNER_(a, b) a##b
#define MTP_CONCAT_(a, b) MTP_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not ok.
#define MTP_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::mtp::Status mtp_status_ = (expr);        \
    if (!mtp_status_.ok()) return mtp_status_; \
  } while (0)

// `MTP_ASSIGN_OR_RETURN(auto x, make_x());` unwraps an Expected or returns its Status.
#define MTP_ASSIGN_OR_RETURN(lhs, expr) \
  MTP_ASSIGN_OR_RETURN_IMPL_(MTP_CONCAT_(mtp_expected_, __LINE__), lhs, expr)
#define MTP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
