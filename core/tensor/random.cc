#include "core/tensor/random.h"

namespace anvil {

Generator& default_generator() {
  static auto* gen = new Generator();
  return *gen;
}

}  // namespace anvil
