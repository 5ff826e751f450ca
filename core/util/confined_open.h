// Files opened inside a root directory without ever leaving it, checked at open time (not
// only when a path was first submitted): a dataset folder swapped for a symlink while its job
// waited, or a symlink inside an image folder that points elsewhere, is refused when it is
// opened, naming the path.
//
// openat2(2) with RESOLVE_BENEATH (Linux 5.6+): symlinks are followed only while they stay
// inside the root, ".." cannot climb out of it, absolute symlinks and /proc magic links are
// refused, all in one race-free lookup by the kernel. Where openat2 is missing (ENOSYS, or
// EPERM under an old seccomp filter) the path is walked one component at a time with
// O_NOFOLLOW, so there every symlink is refused.
#pragma once

#include <string>

namespace anvil {

// An fd for `path` (absolute and lexically inside `root`, or relative to it) opened with
// `flags` (O_CLOEXEC is added). Throws anvil::Error naming the path: outside the root, a
// symlink that leads out, or the system's reason.
int open_beneath(const std::string& root, const std::string& path, int flags);

// True when `path` opens beneath `root` (a check for directory walks; the later open is
// checked again).
bool opens_beneath(const std::string& root, const std::string& path);

}  // namespace anvil
