// Files written so that nothing is ever half-written: AtomicFile writes to a temporary file
// in the destination's folder and, on commit(), fsyncs it, renames it over the destination
// and fsyncs the folder, so after a crash the destination holds either the old content or the
// new, never a mix. A file never committed is removed.
//
// Errors are anvil::Error naming the path and the system's reason. Thread-safety: one
// AtomicFile per thread; the free functions have no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace anvil {

class AtomicFile {
 public:
  // Creates the temporary file next to `path`, with permissions `mode` (0600 for secrets).
  explicit AtomicFile(std::string path, unsigned mode = 0644);
  ~AtomicFile();  // removes the temporary file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  int64_t bytes_written() const { return written_; }
  // Makes the content durable and visible at `path` in one step.
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_path_;
  int fd_ = -1;
  int64_t written_ = 0;
  bool committed_ = false;
};

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomic(const std::string& path, std::string_view bytes);
// The whole file, or an error naming the path.
std::string read_file(const std::string& path);
// The system's description of errno value `err`; thread-safe, unlike std::strerror.
std::string errno_message(int err);

}  // namespace anvil
