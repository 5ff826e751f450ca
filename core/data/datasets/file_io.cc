#include "core/data/datasets/file_io.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <system_error>
#include <vector>

#include "core/util/error.h"

namespace anvil::data::file_io {

std::string ErrnoMessage(int err) { return std::generic_category().message(err); }

GzReader::GzReader(std::string path) : path_(std::move(path)) {
  errno = 0;
  file_ = gzopen(path_.c_str(), "rb");
  // gzopen sets errno when the open itself fails; errno 0 means zlib ran out of memory.
  ANVIL_CHECK(file_ != nullptr, path_,
              ": cannot open: ", errno != 0 ? ErrnoMessage(errno) : std::string("out of memory"));
  // A larger buffer than zlib's 8 KiB default: fewer read calls on big files.
  gzbuffer(file_, 1 << 17);
}

GzReader::~GzReader() {
  if (file_ != nullptr) gzclose(file_);
}

size_t GzReader::Read(void* dst, size_t n) {
  auto* out = static_cast<unsigned char*>(dst);
  size_t done = 0;
  while (done < n) {
    // gzread takes an unsigned int count and returns int: read in chunks below INT_MAX.
    const auto chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int got = gzread(file_, out + done, chunk);
    if (got < 0) {
      int err = Z_OK;
      const char* msg = gzerror(file_, &err);
      ANVIL_CHECK(false, path_,
                  ": read error: ", err == Z_ERRNO ? ErrnoMessage(errno) : std::string(msg));
    }
    done += static_cast<size_t>(got);
    if (static_cast<unsigned>(got) < chunk) break;
  }
  if (done < n) {
    // A short read is the end of the data, unless the compressed stream was cut off: zlib
    // then returns what it could decode and records Z_BUF_ERROR instead of failing the read.
    int err = Z_OK;
    const char* msg = gzerror(file_, &err);
    ANVIL_CHECK(err == Z_OK, path_, ": corrupt or truncated compressed data: ", msg);
  }
  return done;
}

size_t GzReader::SkipToEnd() {
  std::vector<unsigned char> buf(1 << 16);
  size_t total = 0;
  for (;;) {
    const size_t got = Read(buf.data(), buf.size());
    total += got;
    if (got < buf.size()) return total;
  }
}

bool GzReader::compressed() const { return gzdirect(file_) == 0; }

std::string ReadFile(const std::string& path, bool gunzip) {
  std::string data;
  if (gunzip) {
    GzReader reader(path);
    size_t size = 0;
    for (;;) {
      data.resize(std::max<size_t>(size * 2, 1 << 16));
      const size_t want = data.size() - size;
      const size_t got = reader.Read(data.data() + size, want);
      size += got;
      if (got < want) break;
    }
    data.resize(size);
    return data;
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ANVIL_CHECK(f != nullptr, path, ": cannot open: ", ErrnoMessage(errno));
  char buf[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, got);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  ANVIL_CHECK(!failed, path, ": read error: ", ErrnoMessage(err));
  return data;
}

void WriteFileAtomic(const std::string& path, std::string_view bytes, bool gzip) {
  std::vector<char> tmp(path.begin(), path.end());
  const std::string suffix = ".tmp.XXXXXX";
  tmp.insert(tmp.end(), suffix.begin(), suffix.end());
  tmp.push_back('\0');
  const int fd = mkstemp(tmp.data());
  ANVIL_CHECK(fd >= 0, path, ": cannot create a temporary file next to it: ", ErrnoMessage(errno));
  // mkstemp creates the file 0600; data files are meant to be shared, so make it 0644 (not
  // umask-derived: reading the umask means setting it, which would race with other threads).
  fchmod(fd, 0644);
  const std::string tmp_path(tmp.data());
  auto fail = [&](const std::string& what) {
    unlink(tmp_path.c_str());
    return Error(path + ": " + what);
  };
  // "T" makes zlib write the bytes unchanged: one code path for both forms.
  gzFile out = gzdopen(fd, gzip ? "wb" : "wbT");
  if (out == nullptr) {
    close(fd);
    throw fail("cannot open for writing: out of memory");
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const auto chunk = static_cast<unsigned>(std::min<size_t>(bytes.size() - done, 1u << 30));
    const int wrote = gzwrite(out, bytes.data() + done, chunk);
    if (wrote <= 0) {
      int err = Z_OK;
      const std::string msg = gzerror(out, &err);
      const int saved = errno;
      gzclose(out);
      throw fail("write error: " + (err == Z_ERRNO ? ErrnoMessage(saved) : msg));
    }
    done += static_cast<size_t>(wrote);
  }
  if (gzclose(out) != Z_OK) throw fail("write error: " + ErrnoMessage(errno));
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    throw fail("cannot rename the temporary file into place: " + ErrnoMessage(errno));
  }
}

}  // namespace anvil::data::file_io
