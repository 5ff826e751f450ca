#include "core/util/confined_open.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "core/util/error.h"
#include "core/util/file.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// `path` relative to `root` ("" for the root itself), or throws when it lies outside.
std::string Relative(const std::string& root, const std::string& path) {
  const fs::path p = fs::path(path).lexically_normal();
  if (p.is_relative()) {
    const std::string s = p.string();
    ANVIL_CHECK(s != ".." && s.rfind("../", 0) != 0, path, ": leads outside ", root);
    return s == "." ? "" : s;
  }
  const fs::path rel = p.lexically_relative(fs::path(root).lexically_normal());
  const std::string s = rel.string();
  ANVIL_CHECK(!rel.empty() && s != ".." && s.rfind("../", 0) != 0, path, ": outside ", root);
  return s == "." ? "" : s;
}

// One component at a time, no symlink followed anywhere (the fallback).
int WalkNoFollow(int dirfd, const std::string& rel, int flags, const std::string& shown) {
  Fd current{::dup(dirfd)};
  const fs::path p(rel);
  auto it = p.begin();
  while (it != p.end()) {
    const std::string part = it->string();
    ++it;
    const bool last = it == p.end();
    const int f = last ? (flags | O_NOFOLLOW) : (O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    const int next = ::openat(current.fd, part.c_str(), f | O_CLOEXEC);
    if (next < 0) {
      const int err = errno;
      ANVIL_CHECK(err != ELOOP && err != ENOTDIR, shown,
                  ": a symbolic link on the way (refused: this system has no openat2)");
      throw Error(shown + ": cannot open: " + errno_message(err));
    }
    if (last) return next;
    ::close(current.fd);
    current.fd = next;
  }
  return ::dup(current.fd);
}

}  // namespace

int open_beneath(const std::string& root, const std::string& path, int flags) {
  const std::string rel = Relative(root, path);
  Fd dir{::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  ANVIL_CHECK(dir.fd >= 0, root, ": cannot open: ", errno_message(errno));
  if (rel.empty()) return ::dup(dir.fd);
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const long fd = ::syscall(SYS_openat2, dir.fd, rel.c_str(), &how, sizeof(how));
  if (fd >= 0) return static_cast<int>(fd);
  const int err = errno;
  if (err == ENOSYS || err == EPERM) return WalkNoFollow(dir.fd, rel, flags, path);
  ANVIL_CHECK(err != EXDEV, path, ": a symbolic link (or \"..\") on the way leads outside ", root, " (refused)");
  throw Error(path + ": cannot open: " + errno_message(err));
}

bool opens_beneath(const std::string& root, const std::string& path) {
  try {
    ::close(open_beneath(root, path, O_RDONLY | O_NONBLOCK));  // O_NONBLOCK: a FIFO must not hang the check
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace anvil
