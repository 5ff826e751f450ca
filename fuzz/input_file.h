// For targets whose parser reads a file: the fuzzer's input written to one per-process path.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace anvil::fuzz {

// Writes `data` to /tmp/anvil-fuzz-<pid><suffix> (the same file each run) and returns the path.
inline std::string WriteInput(const char* suffix, const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/anvil-fuzz-" + std::to_string(::getpid()) + suffix;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace anvil::fuzz
