// A safetensors file's bytes (checkpoints, exports, models from elsewhere): the header's
// length, its JSON, every tensor's dtype, shape and offsets.
#include <string_view>

#include "core/io/safetensors.h"
#include "core/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)anvil::io::parse_safetensors(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const anvil::Error&) {
  }
  return 0;
}
