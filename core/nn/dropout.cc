// Dropout: see activation.h.
#include "core/nn/activation.h"
#include "core/util/error.h"

namespace anvil::nn {

Dropout::Dropout(double p) : Module("Dropout"), p_(p) {
  ANVIL_CHECK(p >= 0.0 && p <= 1.0, "Dropout: expected p in [0, 1], got ", p);
}

}  // namespace anvil::nn
