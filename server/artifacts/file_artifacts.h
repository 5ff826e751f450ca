// The folder engine of the artifact store (artifact_store.h): the data dir by default, or a
// filesystem every replica mounts (NFS, a Kubernetes ReadWriteMany volume).
//
// An object is the file ROOT/KEY beside ROOT/KEY.sha256 ("<hex digest> <size>"), the sidecar
// written after the file: an object is published once its sidecar is there. A file that is
// already at ROOT/KEY (the data dir's own job folders) is published in place; another file is
// hard-linked in when it is on the same filesystem (no copy: its writers replace files by
// rename, never in place) and copied through a temporary file otherwise. A fetch always
// copies: the caller may write what it fetched. Files registered
// before sidecars existed (no sidecar) are checked against the digest their caller holds.
//
// Thread-safety: no state beyond the root; concurrent calls are safe (each write goes through
// its own temporary file and one rename).
#pragma once

#include <string>

#include "server/artifacts/artifact_store.h"

namespace anvil::server {

class FileArtifactStore final : public ArtifactStore {
 public:
  explicit FileArtifactStore(std::string root);

  ArtifactInfo publish(const std::string& key, const std::string& local_path) override;
  std::string open(const std::string& key, const std::string& cache_path, const std::string& expected_sha256) override;
  ArtifactInfo fetch_to(const std::string& key, const std::string& local_path) override;
  std::optional<ArtifactInfo> stat(const std::string& key) override;
  std::vector<std::string> list(const std::string& prefix) override;
  void remove(const std::string& key) override;
  std::string describe() const override { return "folder " + root_; }

  const std::string& root() const { return root_; }

 private:
  std::string PathOf(const std::string& key) const;
  // The sidecar's digest and size, or nullopt when there is no sidecar.
  static std::optional<ArtifactInfo> ReadSidecar(const std::string& path);
  // The verified digest of the object at `path` (kCorrupt when it does not match).
  ArtifactInfo Verify(const std::string& key, const std::string& path, const std::string& expected_sha256) const;

  const std::string root_;
};

// Places `from`'s bytes at `to` atomically: with `link`, a hard link when both are on one
// filesystem (for files their writers only ever replace by rename); else a copy through a
// temporary file (fsynced, renamed). Throws ArtifactError naming the file.
void place_file(const std::string& from, const std::string& to, bool link);

}  // namespace anvil::server
