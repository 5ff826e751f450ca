// An ONNX file as `anvil models add` would receive it: parsed, checked (opset, operators, the
// nodes' order, every initializer's size against its shape, external data refused) and turned
// into a module. Running the imported graph is left out: a file can ask for large tensors at
// run time, which Predict bounds separately.
#include <string>

#include "core/onnx/import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)anvil::onnx::import_model(std::string(reinterpret_cast<const char*>(data), size), size_t{1} << 20);
  } catch (const anvil::Error&) {
  }
  return 0;
}
