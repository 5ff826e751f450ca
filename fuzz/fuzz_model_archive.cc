// A model archive (.anvil: what the registry loads and Export streams) written to a file
// and loaded: its container, spec, weights and metadata.
#include <string>

#include "core/models/archive.h"
#include "core/util/error.h"
#include "fuzz/input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::WriteInput(".anvil", data, size);
  try {
    (void)anvil::models::load_model_archive(path);
  } catch (const anvil::Error&) {
  }
  return 0;
}
