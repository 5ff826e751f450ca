// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord framing,
// and TensorFlow's mask over it (a CRC stored next to the data it covers is rotated and
// offset so that a CRC of CRC-bearing data does not degenerate).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace anvil::server::tensorboard {

uint32_t crc32c(std::string_view data);
inline uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace anvil::server::tensorboard
