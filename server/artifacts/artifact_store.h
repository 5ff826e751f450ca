// The artifact store: where checkpoints, model archives and imported ONNX files live, so that
// every replica can read what any replica wrote. Two engines behind one interface:
//   - a folder (FileArtifactStore): the data dir by default, or a shared filesystem path;
//   - an S3-compatible object store (S3ArtifactStore, through libcurl's SigV4 signing).
// The scheduler and the registry call only this interface; which engine runs is configuration
// (anvild --artifacts).
//
// Objects are named by keys: relative paths of letters, digits and "._-/" ("jobs/ID/model.anvil").
// Every object is published whole or not at all (written under a temporary name, then made
// visible in one step), carries the SHA-256 of its bytes, and is checked against it on every
// load: a mismatch is ArtifactError kCorrupt, never a silently different file.
//
// Thread-safety: every engine may be called from any thread at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace anvil::server {

class ArtifactError : public Error {
 public:
  // kNotFound: no object under the key. kCorrupt: its bytes do not match its SHA-256 (DATA_LOSS).
  // kUnavailable: the object store cannot be reached or answered 5xx (UNAVAILABLE; the call may
  // be retried). kExists: the key holds different bytes already (objects are written once).
  // kOther: refused for another reason (credentials, a missing bucket): the message says which.
  enum class Kind { kOther, kNotFound, kCorrupt, kUnavailable, kExists };
  explicit ArtifactError(const std::string& message, Kind kind = Kind::kOther) : Error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

struct ArtifactInfo {
  int64_t bytes = 0;
  std::string sha256;  // 64 lowercase hex digits
};

class ArtifactStore {
 public:
  virtual ~ArtifactStore() = default;

  // Publishes the file at `local_path` as `key`: the object appears with all its bytes and its
  // SHA-256, or not at all. Publishing the same bytes again is a no-op; different bytes under
  // an existing key are kExists (objects are immutable: a replica cut off from its job cannot
  // replace what its successor wrote).
  virtual ArtifactInfo publish(const std::string& key, const std::string& local_path) = 0;

  // A local file holding `key`'s bytes, checked against the object's SHA-256 (and against
  // `expected_sha256` when that is not empty) before it is returned. `cache_path` is where a
  // remote object is downloaded to (a local file already there with the right digest is used
  // as is); a folder engine returns its own file and leaves `cache_path` alone.
  virtual std::string open(const std::string& key, const std::string& cache_path,
                           const std::string& expected_sha256 = "") = 0;

  // Places `key`'s bytes, checked, at `local_path` (replacing what is there atomically).
  virtual ArtifactInfo fetch_to(const std::string& key, const std::string& local_path) = 0;

  // The object's size and digest, or nullopt when there is none.
  virtual std::optional<ArtifactInfo> stat(const std::string& key) = 0;

  // The keys that start with `prefix`, sorted.
  virtual std::vector<std::string> list(const std::string& prefix) = 0;

  // Removes the object; no-op when there is none.
  virtual void remove(const std::string& key) = 0;

  // "folder /var/lib/anvil" or "s3 http://host:9000/bucket/prefix": for logs and /metrics.
  virtual std::string describe() const = 0;
};

struct ArtifactOptions {
  // S3: the endpoint URL (http://host:port or https://...); empty: AWS_ENDPOINT_URL, then
  // https://s3.REGION.amazonaws.com. Credentials come from AWS_ACCESS_KEY_ID,
  // AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN); the region from AWS_REGION or
  // AWS_DEFAULT_REGION (us-east-1 when neither is set).
  std::string s3_endpoint;
  // Seconds a request may take before it is abandoned as UNAVAILABLE (connecting: a fifth of it).
  int64_t timeout_s = 300;
};

// `location`: empty (the folder `data_root`), a folder path, "file:///path" or
// "s3://bucket[/prefix]". An S3 store checks that its bucket answers before it is returned.
std::unique_ptr<ArtifactStore> open_artifact_store(const std::string& location, const std::string& data_root,
                                                   const ArtifactOptions& options = {});

// ".tmp.XXXXXX" (six random letters or digits): the suffix of every temporary file and key the
// artifact store writes. anvild's start-up sweep removes files left with it; listings skip it.
std::string temporary_suffix();

// Throws ArtifactError kOther unless `key` is a relative path of [A-Za-z0-9._-] segments
// (no "." or ".." segment, no empty one), at most 512 bytes.
void check_artifact_key(const std::string& key);

}  // namespace anvil::server
