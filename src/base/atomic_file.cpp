#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/log.h"

namespace mtp {
namespace {

// The temporary files being written, so that SIGINT and SIGTERM remove them before the process ends (a
// destructor does not run then). Fixed storage: the handler may only read memory and call unlink().
constexpr int kMaxOpen = 16;
char g_paths[kMaxOpen][PATH_MAX];
std::atomic<bool> g_claimed[kMaxOpen];  // a writer owns the slot
std::atomic<bool> g_open[kMaxOpen];     // its path is complete: the handler may remove it

extern "C" void remove_temps_and_exit(int sig) {
  for (int i = 0; i < kMaxOpen; ++i)
    if (g_open[i].load(std::memory_order_acquire)) ::unlink(g_paths[i]);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// Installs the handler for SIGINT and SIGTERM where the program left them at their default (a program that
// handles them itself, as `mtp serve` does, keeps its own).
void install_handler_once() {
  static const bool installed = [] {
    for (int sig : {SIGINT, SIGTERM}) {
      struct sigaction old {};
      if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
      struct sigaction sa {};
      sa.sa_handler = remove_temps_and_exit;
      sigemptyset(&sa.sa_mask);
      sigaction(sig, &sa, nullptr);
    }
    return true;
  }();
  (void)installed;
}

// A slot for `path`, or -1 when all are taken (that file is then only removed by its destructor).
int register_temp(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kMaxOpen; ++i) {
    if (g_claimed[i].exchange(true)) continue;
    std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
    g_open[i].store(true, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot < 0) return;
  g_open[slot].store(false, std::memory_order_release);
  g_claimed[slot].store(false, std::memory_order_release);
}

// Says so where an earlier run left a temporary file for this target (killed before it could clean up).
void report_stale_temps(const std::filesystem::path& dir, const std::string& prefix) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0)
      log_warn(e.path().string(), ": a temporary file left by an earlier run that did not finish; remove it");
  }
}

}  // namespace

AtomicFile::~AtomicFile() {
  abandon();
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : fd_(other.fd_),
      slot_(other.slot_),
      position_(other.position_),
      final_path_(std::move(other.final_path_)),
      temp_path_(std::move(other.temp_path_)) {
  other.fd_ = -1;
  other.slot_ = -1;
}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    abandon();
    fd_ = other.fd_;
    slot_ = other.slot_;
    position_ = other.position_;
    final_path_ = std::move(other.final_path_);
    temp_path_ = std::move(other.temp_path_);
    other.fd_ = -1;
    other.slot_ = -1;
  }
  return *this;
}

void AtomicFile::abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
    fd_ = -1;
  }
  release_slot();
}

void AtomicFile::release_slot() {
  unregister_temp(slot_);
  slot_ = -1;
}

Expected<AtomicFile> AtomicFile::create(const std::string& final_path) {
  namespace fs = std::filesystem;
  fs::path target(final_path);
  if (target.filename().empty()) return invalid_argument(final_path, ": not a file name");
  std::error_code ec;
  if (fs::is_directory(target, ec)) return invalid_argument(final_path, ": is a directory");
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  // The temporary lives beside the target so that rename() stays on one file system and is atomic.
  const std::string prefix = "." + target.filename().string() + ".tmp.";
  report_stale_temps(dir, prefix);
  std::string pattern = (dir / (prefix + "XXXXXX")).string();
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  int fd = mkostemp(buf.data(), O_CLOEXEC);
  if (fd < 0)
    return io_error(final_path, ": cannot create a temporary file in ", dir.string(), ": ",
                    std::strerror(errno));
  AtomicFile f;
  f.fd_ = fd;
  f.final_path_ = final_path;
  f.temp_path_ = buf.data();
  install_handler_once();
  f.slot_ = register_temp(f.temp_path_);
  return f;
}

Status AtomicFile::pwrite(std::span<const uint8_t> bytes, uint64_t offset) {
  if (fd_ < 0) return io_error(final_path_, ": write after commit or abandon");
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error(temp_path_, ": write failed: ", std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status AtomicFile::write(std::span<const uint8_t> bytes) {
  MTP_RETURN_IF_ERROR(pwrite(bytes, position_));
  position_ += bytes.size();
  return Status::Ok();
}

Status AtomicFile::write_zeros(uint64_t count) {
  static const uint8_t kZeros[4096] = {};
  while (count > 0) {
    uint64_t n = count < sizeof(kZeros) ? count : sizeof(kZeros);
    MTP_RETURN_IF_ERROR(write({kZeros, static_cast<size_t>(n)}));
    count -= n;
  }
  return Status::Ok();
}

Status AtomicFile::write_whole(const std::string& final_path, std::string_view bytes) {
  MTP_ASSIGN_OR_RETURN(AtomicFile f, create(final_path));
  MTP_RETURN_IF_ERROR(f.write({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}));
  return f.commit();
}

Status AtomicFile::commit() {
  if (fd_ < 0) return io_error(final_path_, ": commit after commit or abandon");
  // The temporary was created 0600; give the result the usual permissions of a new file.
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd_, 0666 & ~mask) != 0) return io_error(temp_path_, ": chmod failed: ", std::strerror(errno));
  if (fsync(fd_) != 0) return io_error(temp_path_, ": fsync failed: ", std::strerror(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(temp_path_.c_str());
    return io_error(temp_path_, ": close failed: ", std::strerror(errno));
  }
  fd_ = -1;
  if (std::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    int err = errno;
    ::unlink(temp_path_.c_str());
    release_slot();
    return io_error(final_path_, ": rename failed: ", std::strerror(err));
  }
  release_slot();
  return Status::Ok();
}

}  // namespace mtp
