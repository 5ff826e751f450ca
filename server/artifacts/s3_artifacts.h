// The S3-compatible engine of the artifact store (artifact_store.h): AWS S3, MinIO, Ceph RGW,
// or any server speaking the S3 REST API, reached through libcurl. libcurl signs each request
// with AWS Signature Version 4 itself (CURLOPT_AWS_SIGV4, curl 7.75+; Debian 12 has 7.88), so
// there is no home-made signing code and no SDK (the AWS C++ SDK is not packaged by Debian).
//
// Layout: the object KEY lives at BUCKET/PREFIX/KEY (path-style URLs, which every
// S3-compatible server accepts). A publish uploads to KEY.tmp.RANDOM with the SHA-256 as both
// the payload hash the server verifies (x-amz-content-sha256) and user metadata
// (x-amz-meta-sha256), copies it to KEY in one server-side step, and deletes the temporary key:
// KEY appears with all its bytes or not at all. A load streams to a temporary file while
// hashing, compares with the metadata, and only then renames the file into place.
//
// Requests that fail to connect, time out or get a 5xx are retried (4 attempts, 100 ms backoff
// doubling) before they throw ArtifactError kUnavailable.
//
// Thread-safety: immutable after construction; every call uses its own curl handle.
#pragma once

#include <string>

#include "server/artifacts/artifact_store.h"

namespace anvil::server {

struct S3Location {
  std::string endpoint;  // "http://127.0.0.1:9000", no trailing slash
  std::string bucket;
  std::string prefix;  // "" or ending in "/"
  std::string region = "us-east-1";
  std::string access_key, secret_key, session_token;
  int64_t timeout_s = 300;
  int list_page_size = 0;  // keys per ListObjectsV2 page; 0: the server's (1000)
};

class S3ArtifactStore final : public ArtifactStore {
 public:
  // Checks that the bucket answers (HEAD) and creates it when there is none: ArtifactError
  // naming the endpoint and the bucket when it cannot be made, the credentials are refused or
  // nothing answers.
  explicit S3ArtifactStore(S3Location where);

  ArtifactInfo publish(const std::string& key, const std::string& local_path) override;
  std::string open(const std::string& key, const std::string& cache_path, const std::string& expected_sha256) override;
  ArtifactInfo fetch_to(const std::string& key, const std::string& local_path) override;
  std::optional<ArtifactInfo> stat(const std::string& key) override;
  std::vector<std::string> list(const std::string& prefix) override;
  void remove(const std::string& key) override;
  std::string describe() const override;

 private:
  std::string ObjectUrl(const std::string& key) const;
  // Downloads `key` to `local_path` through a temporary file, checking the digest.
  ArtifactInfo Download(const std::string& key, const std::string& local_path, const std::string& expected_sha256);

  const S3Location where_;
};

// "s3://bucket/prefix" → bucket and prefix ("" or ending in "/"). Throws ArtifactError on a
// malformed location.
S3Location parse_s3_location(const std::string& location);

}  // namespace anvil::server
