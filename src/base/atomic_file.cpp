#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace mtp {

AtomicFile::~AtomicFile() {
  abandon();
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : fd_(other.fd_),
      position_(other.position_),
      final_path_(std::move(other.final_path_)),
      temp_path_(std::move(other.temp_path_)) {
  other.fd_ = -1;
}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    abandon();
    fd_ = other.fd_;
    position_ = other.position_;
    final_path_ = std::move(other.final_path_);
    temp_path_ = std::move(other.temp_path_);
    other.fd_ = -1;
  }
  return *this;
}

void AtomicFile::abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
    fd_ = -1;
  }
}

Expected<AtomicFile> AtomicFile::create(const std::string& final_path) {
  namespace fs = std::filesystem;
  fs::path target(final_path);
  if (target.filename().empty()) return invalid_argument(final_path, ": not a file name");
  std::error_code ec;
  if (fs::is_directory(target, ec)) return invalid_argument(final_path, ": is a directory");
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  // The temporary lives beside the target so that rename() stays on one file system and is atomic.
  std::string pattern = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
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
    return io_error(final_path_, ": rename failed: ", std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace mtp
