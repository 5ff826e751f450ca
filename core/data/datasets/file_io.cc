#include "core/data/datasets/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <memory>
#include <system_error>
#include <vector>

#include "core/util/confined_open.h"
#include "core/util/error.h"
#include "core/util/file.h"
#include "core/util/interruption.h"

namespace anvil::data::file_io {

namespace {
// A file is read in chunks of at most this many bytes between interruption points (about 20-100
// ms of reading or decompressing).
constexpr size_t kInterruptibleChunk = size_t{16} << 20;
}  // namespace

int OpenRegularBeneath(const std::string& confine_to, const std::string& path) {
  const int fd = open_beneath(confine_to, path, O_RDONLY | O_NONBLOCK);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

GzReader::GzReader(std::string path, const std::string& confine_to) : path_(std::move(path)) {
  errno = 0;
  if (confine_to.empty()) {
    file_ = gzopen(path_.c_str(), "rb");
  } else {
    const int fd = OpenRegularBeneath(confine_to, path_);
    file_ = gzdopen(fd, "rb");
    if (file_ == nullptr) ::close(fd);
  }
  // gzopen sets errno when the open itself fails; errno 0 means zlib ran out of memory.
  ANVIL_CHECK(file_ != nullptr, path_,
              ": cannot open: ", errno != 0 ? errno_message(errno) : std::string("out of memory"));
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
      ANVIL_CHECK(false, path_, ": read error: ", err == Z_ERRNO ? errno_message(errno) : std::string(msg));
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

std::string ReadFile(const std::string& path, bool gunzip, const std::string& confine_to) {
  std::string data;
  if (gunzip) {
    GzReader reader(path, confine_to);
    size_t size = 0;
    for (;;) {
      interruption_point();  // a caller may give up a large file between chunks
      if (size == data.size()) data.resize(std::max<size_t>(size * 2, 1 << 16));
      const size_t want = std::min<size_t>(data.size() - size, kInterruptibleChunk);
      const size_t got = reader.Read(data.data() + size, want);
      size += got;
      if (got < want) break;
    }
    data.resize(size);
    return data;
  }
  std::FILE* f = nullptr;
  if (confine_to.empty()) {
    f = std::fopen(path.c_str(), "rb");
  } else {
    const int fd = OpenRegularBeneath(confine_to, path);
    f = ::fdopen(fd, "rb");
    if (f == nullptr) ::close(fd);
  }
  ANVIL_CHECK(f != nullptr, path, ": cannot open: ", errno_message(errno));
  char buf[1 << 16];
  size_t got = 0;
  // Closed on every way out, a caller giving up between chunks included.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(f, &std::fclose);
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    data.append(buf, got);
    if (data.size() % kInterruptibleChunk < got) interruption_point();
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  file.reset();
  ANVIL_CHECK(!failed, path, ": read error: ", errno_message(err));
  return data;
}

void WriteFileAtomic(const std::string& path, std::string_view bytes, bool gzip) {
  if (!gzip) {
    write_file_atomic(path, bytes);
    return;
  }
  // Compress in memory (gzip framing: windowBits 15 + 16), then write atomically.
  ANVIL_CHECK(bytes.size() < UINT_MAX, path, ": gzip writes are limited to 4 GiB here, got ", bytes.size(), " bytes");
  z_stream z{};
  ANVIL_CHECK(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK, path,
              ": cannot start gzip compression: out of memory");
  std::string out(deflateBound(&z, static_cast<uLong>(bytes.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  ANVIL_CHECK(rc == Z_STREAM_END, path, ": gzip compression failed (zlib error ", rc, ")");
  write_file_atomic(path, out);
}

}  // namespace anvil::data::file_io
