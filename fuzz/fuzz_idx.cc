// An IDX file (MNIST's format), gzip-compressed or not: magic, dtype, dims and the sizes they
// promise against the bytes present.
#include <string>

#include "core/data/datasets/idx.h"
#include "core/util/error.h"
#include "fuzz/input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::WriteInput(".idx", data, size);
  try {
    (void)anvil::data::read_idx(path);
  } catch (const anvil::Error&) {
  }
  return 0;
}
