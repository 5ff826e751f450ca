// An IDX file (MNIST's format), gzip-compressed or not: magic, dtype, dims and the sizes they
// promise against the bytes present.
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/data/datasets/idx.h"
#include "core/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/anvil-fuzz-" + std::to_string(::getpid()) + ".idx";
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                 static_cast<std::streamsize>(size));
  try {
    (void)anvil::data::read_idx(path);
  } catch (const anvil::Error&) {
  }
  return 0;
}
