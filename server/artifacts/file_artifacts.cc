// The folder engine of the artifact store: see file_artifacts.h.
#include "server/artifacts/file_artifacts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/util/file.h"
#include "server/artifacts/digest.h"

namespace fs = std::filesystem;

namespace anvil::server {
namespace {

constexpr char kSidecar[] = ".sha256";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void SyncFolder(const std::string& path) {
  const int fd = ::open(fs::path(path).parent_path().c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Creates `to` with `from`'s bytes unless `to` exists (then false): a hard link on one
// filesystem, else a copy written to a temporary name, synced, and linked into place (link(2)
// never replaces, unlike rename(2)).
bool CreateNoReplace(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::create_directories(fs::path(to).parent_path(), ec);
  if (::link(from.c_str(), to.c_str()) == 0) {
    SyncFolder(to);
    return true;
  }
  if (errno == EEXIST) return false;
  const std::string tmp = to + temporary_suffix();
  place_file(from, tmp, /*link=*/false);
  const bool created = ::link(tmp.c_str(), to.c_str()) == 0;
  const int err = errno;
  ::unlink(tmp.c_str());
  if (!created && err != EEXIST) throw ArtifactError(to + ": cannot create: " + errno_message(err));
  if (created) SyncFolder(to);
  return created;
}

ArtifactInfo DigestOf(const std::string& path) {
  ArtifactInfo info;
  std::error_code ec;
  info.bytes = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) throw ArtifactError(path + ": cannot read: " + ec.message(), ArtifactError::Kind::kNotFound);
  info.sha256 = sha256_file(path);
  return info;
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

void place_file(const std::string& from, const std::string& to, bool link) {
  std::error_code ec;
  fs::create_directories(fs::path(to).parent_path(), ec);
  const std::string tmp = to + temporary_suffix();
  if (link && ::link(from.c_str(), tmp.c_str()) == 0) {
    if (std::rename(tmp.c_str(), to.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      throw ArtifactError(to + ": cannot rename into place: " + errno_message(err));
    }
    SyncFolder(to);
    return;
  }
  // Another filesystem (or one without hard links): a copy.
  std::ifstream in(from, std::ios::binary);
  if (!in) throw ArtifactError(from + ": cannot open: " + errno_message(errno), ArtifactError::Kind::kNotFound);
  try {
    AtomicFile out(to);
    std::string buffer(1 << 20, '\0');
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      out.write(buffer.data(), static_cast<size_t>(in.gcount()));
    }
    if (in.bad()) throw ArtifactError(from + ": read error: " + errno_message(errno));
    out.commit();
  } catch (const ArtifactError&) {
    throw;
  } catch (const Error& e) {
    throw ArtifactError(e.what());
  }
}

FileArtifactStore::FileArtifactStore(std::string root) : root_(std::move(root)) {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (!fs::is_directory(root_)) {
    throw ArtifactError("artifact folder " + root_ + ": not a folder" + (ec ? " (" + ec.message() + ")" : ""));
  }
}

std::string FileArtifactStore::PathOf(const std::string& key) const {
  check_artifact_key(key);
  return (fs::path(root_) / key).string();
}

std::optional<ArtifactInfo> FileArtifactStore::ReadSidecar(const std::string& path) {
  std::ifstream in(path + kSidecar);
  if (!in) return std::nullopt;
  ArtifactInfo info;
  in >> info.sha256 >> info.bytes;
  if (info.sha256.size() != 64) return std::nullopt;  // torn by hand: treated as never published
  return info;
}

ArtifactInfo FileArtifactStore::Verify(const std::string& key, const std::string& path,
                                       const std::string& expected_sha256) const {
  const std::optional<ArtifactInfo> recorded = ReadSidecar(path);
  if (!fs::exists(path)) throw ArtifactError("artifact " + key + " is missing", ArtifactError::Kind::kNotFound);
  const ArtifactInfo actual = DigestOf(path);
  for (const std::string& want : {recorded ? recorded->sha256 : std::string(), expected_sha256}) {
    if (!want.empty() && want != actual.sha256) {
      throw ArtifactError("artifact " + key + " is corrupt (SHA-256 " + actual.sha256.substr(0, 12) + "…, recorded " +
                              want.substr(0, 12) + "…)",
                          ArtifactError::Kind::kCorrupt);
    }
  }
  return actual;
}

ArtifactInfo FileArtifactStore::publish(const std::string& key, const std::string& local_path) {
  const std::string path = PathOf(key);
  if (SameFile(local_path, path)) {
    // Already in place (the data dir's own job folder): record its digest.
    const ArtifactInfo info = DigestOf(path);
    const std::optional<ArtifactInfo> recorded = ReadSidecar(path);
    if (!recorded || recorded->sha256 != info.sha256) {
      write_file_atomic(path + kSidecar, info.sha256 + " " + std::to_string(info.bytes) + "\n");
    }
    return info;
  }
  const ArtifactInfo info = DigestOf(local_path);
  const std::string sidecar = info.sha256 + " " + std::to_string(info.bytes) + "\n";
  for (int attempt = 0; attempt < 2; ++attempt) {
    // The data never replaces a file a reader may hold: created, or found there.
    if (CreateNoReplace(local_path, path)) {
      write_file_atomic(path + kSidecar, sidecar);
      return info;
    }
    const ArtifactInfo existing = DigestOf(path);
    if (existing.sha256 == info.sha256) {  // the same bytes (a retry, or a publisher beside this one)
      const std::optional<ArtifactInfo> recorded = ReadSidecar(path);
      if (!recorded || recorded->sha256 != info.sha256) write_file_atomic(path + kSidecar, sidecar);
      return info;
    }
    // Other bytes: a published object (or one being published right now) is never replaced;
    // a file a crashed publish left without its digest long ago is.
    std::error_code ec;
    const auto age = fs::file_time_type::clock::now() - fs::last_write_time(path, ec);
    if (ReadSidecar(path) || ec || age < std::chrono::minutes(10)) {
      throw ArtifactError("artifact " + key + " exists with other bytes (SHA-256 " + existing.sha256.substr(0, 12) +
                              "…); objects are written once",
                          ArtifactError::Kind::kExists);
    }
    ::unlink(path.c_str());
  }
  throw ArtifactError("artifact " + key + ": another publisher keeps replacing it", ArtifactError::Kind::kExists);
}

std::string FileArtifactStore::open(const std::string& key, const std::string& /*cache_path*/,
                                    const std::string& expected_sha256) {
  const std::string path = PathOf(key);
  Verify(key, path, expected_sha256);
  return path;
}

ArtifactInfo FileArtifactStore::fetch_to(const std::string& key, const std::string& local_path) {
  const std::string path = PathOf(key);
  const ArtifactInfo info = Verify(key, path, "");
  // A copy: the caller owns what it fetched and may write it in place.
  if (!SameFile(path, local_path)) place_file(path, local_path, /*link=*/false);
  return info;
}

std::optional<ArtifactInfo> FileArtifactStore::stat(const std::string& key) {
  const std::string path = PathOf(key);
  if (!fs::exists(path)) return std::nullopt;
  return ReadSidecar(path);
}

std::vector<std::string> FileArtifactStore::list(const std::string& prefix) {
  if (!prefix.empty()) check_artifact_key(prefix.back() == '/' ? prefix.substr(0, prefix.size() - 1) : prefix);
  const size_t slash = prefix.rfind('/');
  const fs::path dir = fs::path(root_) / (slash == std::string::npos ? "" : prefix.substr(0, slash));
  std::vector<std::string> keys;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string rel = fs::relative(it->path(), root_, ec).string();
    if (rel.compare(0, prefix.size(), prefix) != 0 || EndsWith(rel, kSidecar)) continue;
    if (rel.find(".tmp.") != std::string::npos) continue;
    if (fs::exists(it->path().string() + kSidecar)) keys.push_back(rel);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

void FileArtifactStore::remove(const std::string& key) {
  const std::string path = PathOf(key);
  std::error_code ec;
  fs::remove(path + kSidecar, ec);  // unpublished first
  fs::remove(path, ec);
}

}  // namespace anvil::server
