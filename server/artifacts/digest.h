// SHA-256 for the artifact store, through OpenSSL's libcrypto (EVP), which uses the CPU's SHA
// extensions where it has them: every published object is hashed once and every load checks
// it, so the digest's speed is the floor of both (bench/RESULTS.md, "Artifacts"). The values
// are the same as core/util/sha256.h's (FIPS 180-4); the tests check one against the other.
//
// Thread-safety: a Digest belongs to one thread; the free function shares nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace anvil::server {

class Digest {
 public:
  Digest();
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;
  void update(const void* data, size_t n);
  // 64 lowercase hex digits; the object is spent afterwards.
  std::string hex();

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

// The hex digest of the file at `path`; throws ArtifactError naming it when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace anvil::server
