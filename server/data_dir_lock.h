// One anvild per data directory. Two servers on one folder would both resume its interrupted
// jobs, write the same checkpoints and serve from the same archives; SQLite's locking keeps
// the store itself whole but not the rest. So anvild holds an exclusive lock on
// DATA_DIR/anvild.lock (flock: the kernel drops it when the process ends, however it ends, so
// a crash leaves nothing to clean up) and a second server on the folder refuses to start,
// naming the first one's pid.
//
// Holding the lock also makes the folder's temporary files (AtomicFile's NAME.tmp.XXXXXX,
// core/util/file.h) provably unfinished: no one else is writing them. A start removes them.
// Thread-safety: acquired once at start and released at exit by the main thread; no member is
// called concurrently.
#pragma once

#include <cstdint>
#include <string>

namespace anvil::server {

class DataDirLock {
 public:
  // Takes the lock on `data_dir` (an existing folder) and writes this process's pid into the
  // lock file. Throws anvil::Error when another process (or another server in this process)
  // holds it, or when the file cannot be created. Replicas that share the folder (their store
  // is PostgreSQL) each lock a file of their own instance id: `file` = anvild-INSTANCE.lock.
  explicit DataDirLock(const std::string& data_dir, const std::string& file = "anvild.lock");
  ~DataDirLock();  // releases the lock
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Removes every AtomicFile temporary (a name ending in ".tmp." and six characters) under
// `data_dir`, recursively; returns how many. Only for a folder whose DataDirLock is held.
int64_t remove_unfinished_temporaries(const std::string& data_dir);

}  // namespace anvil::server
