// SHA-256 (FIPS 180-4), used to fingerprint checkpoints, datasets and model files so that a
// file can be checked against the digest recorded when it was written.
//
// Thread-safety: a Sha256 object belongs to one thread; the free functions share no state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace anvil {

class Sha256 {
 public:
  Sha256();

  // Feeds more message bytes; the digest does not depend on how the message is split.
  void update(const void* data, size_t n);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // Pads and finishes the message. The object is spent afterwards: a further update() or
  // digest() throws, since silently hashing on from a padded state would give a wrong value.
  std::array<uint8_t, 32> digest();
  // digest() as 64 lowercase hex characters.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

// `bytes` as lowercase hex, two digits per byte.
std::string hex_encode(std::string_view bytes);
// The hex digest of `bytes`.
std::string sha256_hex(std::string_view bytes);
// The hex digest of the file at `path`, read in 1 MiB chunks so large files need no large
// buffer; errors name the path.
std::string sha256_file_hex(const std::string& path);

}  // namespace anvil
