// Atomic file writes: see file.h.
#include "core/util/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "core/util/error.h"
#include "core/util/fault_point.h"

namespace anvil {

std::string errno_message(int err) { return std::generic_category().message(err); }

AtomicFile::AtomicFile(std::string path, unsigned mode) : path_(std::move(path)) {
  std::vector<char> tmp(path_.begin(), path_.end());
  const std::string suffix = ".tmp.XXXXXX";
  tmp.insert(tmp.end(), suffix.begin(), suffix.end());
  tmp.push_back('\0');
  fd_ = mkstemp(tmp.data());
  ANVIL_CHECK(fd_ >= 0, path_, ": cannot create a temporary file next to it: ", errno_message(errno));
  tmp_path_ = tmp.data();
  fchmod(fd_, static_cast<mode_t>(mode));  // mkstemp makes 0600; most written files are meant to be readable
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlink(tmp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  ANVIL_CHECK(!committed_, path_, ": write after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    ANVIL_CHECK(w > 0, path_, ": write error: ", errno_message(errno));
    p += w;
    n -= static_cast<size_t>(w);
    written_ += w;
  }
}

void AtomicFile::commit() {
  ANVIL_CHECK(!committed_, path_, ": committed twice");
  fault_point("atomic_file:written");
  ANVIL_CHECK(fsync(fd_) == 0, path_, ": fsync failed: ", errno_message(errno));
  fault_point("atomic_file:synced");
  ANVIL_CHECK(close(fd_) == 0, path_, ": close failed: ", errno_message(errno));
  fd_ = -1;
  ANVIL_CHECK(std::rename(tmp_path_.c_str(), path_.c_str()) == 0, path_,
              ": cannot rename the temporary file into place: ", errno_message(errno));
  committed_ = true;
  fault_point("atomic_file:renamed");
  // The rename is durable only once the folder's entry is on disk too.
  const auto slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ANVIL_CHECK(in.good(), path, ": cannot open: ", errno_message(errno));
  std::ostringstream os;
  os << in.rdbuf();
  ANVIL_CHECK(!in.bad(), path, ": read error: ", errno_message(errno));
  return os.str();
}

}  // namespace anvil
