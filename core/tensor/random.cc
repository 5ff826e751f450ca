#include "core/tensor/random.h"

namespace anvil {

namespace {
thread_local Generator* thread_generator = nullptr;
}  // namespace

Generator& default_generator() {
  if (thread_generator != nullptr) return *thread_generator;
  static auto* gen = new Generator();
  return *gen;
}

ScopedDefaultGenerator::ScopedDefaultGenerator(Generator& g) : previous_(thread_generator) { thread_generator = &g; }

ScopedDefaultGenerator::~ScopedDefaultGenerator() { thread_generator = previous_; }

}  // namespace anvil
