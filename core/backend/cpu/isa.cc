#include "core/backend/cpu/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/util/error.h"

namespace anvil::cpu {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_override{kUnset};  // a ScopedIsa's level

// ANVIL_CPU_ISA, read once. An unknown name is kept as the error it raised, so every call
// raises it again (the first kernel of the process says what is wrong, and so does the next).
struct EnvLevel {
  CpuIsa level = CpuIsa::kGeneric;
  std::string error;
};

const EnvLevel& FromEnv() {
  static const EnvLevel env = [] {
    EnvLevel e;
    const CpuIsa detected = detected_isa();
    e.level = detected;
    const char* value = std::getenv("ANVIL_CPU_ISA");
    if (value == nullptr || *value == '\0') return e;
    try {
      const CpuIsa asked = parse_isa(value);
      if (static_cast<int>(asked) > static_cast<int>(detected)) {
        std::fprintf(stderr, "anvil: ANVIL_CPU_ISA=%s asks for more than this CPU supports (%s); running at %s\n",
                     value, std::string(isa_name(detected)).c_str(), std::string(isa_name(detected)).c_str());
      } else {
        e.level = asked;
      }
    } catch (const Error& err) {
      e.error = std::string("ANVIL_CPU_ISA: ") + err.what();
    }
    return e;
  }();
  return env;
}

}  // namespace

CpuIsa requested_isa() {
  const EnvLevel& env = FromEnv();
  if (!env.error.empty()) throw Error(env.error);
  return env.level;
}

CpuIsa active_isa() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o != kUnset) return static_cast<CpuIsa>(o);
  return requested_isa();
}

ScopedIsa::ScopedIsa(CpuIsa level) : previous_(g_override.load()) {
  ANVIL_CHECK(static_cast<int>(level) <= static_cast<int>(detected_isa()), "ScopedIsa: this CPU supports up to ",
              isa_name(detected_isa()), ", not ", isa_name(level));
  g_override.store(static_cast<int>(level));
}

ScopedIsa::~ScopedIsa() { g_override.store(previous_); }

}  // namespace anvil::cpu
