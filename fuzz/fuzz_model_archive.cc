// A model archive (.anvil: what the registry loads and Export streams) written to a file
// and loaded: its container, spec, weights and metadata.
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/models/archive.h"
#include "core/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/anvil-fuzz-archive-" + std::to_string(::getpid()) + ".anvil";
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                 static_cast<std::streamsize>(size));
  try {
    (void)anvil::models::load_model_archive(path);
  } catch (const anvil::Error&) {
  }
  return 0;
}
