// A model spec (JSON): the pricing walk that allocates nothing, and the real build for specs
// it priced as small (so the fuzzer cannot spend its time on legitimately huge models).
#include <string>

#include "core/models/spec.h"
#include "core/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const anvil::models::ModelCost cost = anvil::models::estimate_model(text);
    if (cost.parameters > 1'000'000 || cost.activations_per_sample > 1'000'000) return 0;
    (void)anvil::models::build_model(text);
  } catch (const anvil::Error&) {
  }
  return 0;
}
