// File reading and writing shared by the dataset formats: whole-file and streaming reads that
// decompress gzip transparently (so "x.idx" and "x.idx.gz" read alike), and atomic writes.
// Every error is an anvil::Error whose message starts with the path, and for system errors
// ends with the system's reason (e.g. "No such file or directory").
//
// Thread-safety: the free functions are safe to call concurrently (no shared state);
// one GzReader must not be used by two threads at once.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

struct gzFile_s;  // zlib's handle type, declared here so users need not include zlib.h

namespace anvil::data::file_io {

// A sequential reader over a file that may be gzip-compressed (zlib detects it from the
// content, not the name). Throws on open failure naming the path and the system's reason.
class GzReader {
 public:
  // With `confine_to` (a directory), the file is opened beneath it (core/util/confined_open.h)
  // and must be a regular file.
  explicit GzReader(std::string path, const std::string& confine_to = "");
  ~GzReader();
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to `n` bytes into `dst`; returns how many were read, fewer than `n` only at the
  // end of the data. Throws on an I/O error or corrupt or truncated compressed data.
  size_t Read(void* dst, size_t n);
  // Counts and discards the bytes left (for "trailing bytes" diagnostics).
  size_t SkipToEnd();
  // False when the file is read as is (not gzip); meaningful after the first Read.
  bool compressed() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile_s* file_ = nullptr;
};

// The whole content of `path`, gunzipped when `gunzip` and the content is gzip-compressed.
// With `confine_to`, opened beneath that directory and required to be a regular file.
std::string ReadFile(const std::string& path, bool gunzip, const std::string& confine_to = "");

// An fd for reading `path` beneath `confine_to`, refused unless it is a regular file (a FIFO
// or device would block or never end).
int OpenRegularBeneath(const std::string& confine_to, const std::string& path);

// Writes `bytes` to `path` (gzip-compressed when `gzip`) through a temporary file in the same
// folder that is renamed over `path` only once complete, so readers never see a partial file
// and a failed write leaves any previous file intact.
void WriteFileAtomic(const std::string& path, std::string_view bytes, bool gzip);

}  // namespace anvil::data::file_io
