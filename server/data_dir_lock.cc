#include "server/data_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/util/error.h"
#include "core/util/file.h"

namespace anvil::server {

namespace fs = std::filesystem;

namespace {

// The pid the lock file names ("" when it names none: an older or a half-written file).
std::string PidIn(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "";
  std::string pid(buf, static_cast<size_t>(n));
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.find_first_not_of("0123456789") == std::string::npos ? pid : "";
}

// AtomicFile's temporary names: DEST + ".tmp." + six characters from mkstemp.
bool IsTemporary(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  return at != std::string::npos && at > 0 && name.size() == at + 5 + 6;
}

}  // namespace

DataDirLock::DataDirLock(const std::string& data_dir, const std::string& file)
    : path_((fs::path(data_dir) / file).string()) {
  fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ANVIL_CHECK(fd_ >= 0, "cannot create the data directory's lock file ", path_, ": ", errno_message(errno));
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = PidIn(fd_);
    close(fd_);
    fd_ = -1;
    ANVIL_CHECK(err != EWOULDBLOCK, "the data directory ", data_dir, " is in use by another anvild",
                pid.empty() ? std::string() : " (pid " + pid + ")", ", which holds ", path_,
                ". Stop it first, or give this one its own --data-dir",
                file == "anvild.lock" ? "" : " (or its own --instance)");
    throw Error(detail::StrCat("cannot lock ", path_, ": ", errno_message(err)));
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  // Best effort: the pid only makes the refusal above more helpful; the lock is what counts.
  if (ftruncate(fd_, 0) == 0 && pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size())) {
    fsync(fd_);
  }
}

DataDirLock::~DataDirLock() {
  if (fd_ >= 0) close(fd_);  // closing the last descriptor releases the flock
}

int64_t remove_unfinished_temporaries(const std::string& data_dir) {
  int64_t removed = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(data_dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec) || !IsTemporary(it->path().filename().string())) continue;
    std::error_code rm_ec;
    if (fs::remove(it->path(), rm_ec)) ++removed;
  }
  return removed;
}

}  // namespace anvil::server
