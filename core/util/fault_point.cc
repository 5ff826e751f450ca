#include "core/util/fault_point.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "core/util/error.h"
#include "core/util/mutex.h"

namespace anvil {
namespace {

struct Armed {
  Mutex mu;
  std::string spec ABSL_GUARDED_BY(mu);
  std::atomic<bool> any{false};
  Armed() {
    if (const char* e = std::getenv("ANVIL_FAULT_POINT")) spec = e;
    any = !spec.empty();
  }
};

Armed& State() {
  static Armed armed;
  return armed;
}

}  // namespace

void set_fault_point(const std::string& spec) {
  Armed& a = State();
  MutexLock lock(&a.mu);
  a.spec = spec;
  a.any.store(!spec.empty(), std::memory_order_release);
}

bool fault_point_fires(const std::string& name) {
  Armed& a = State();
  if (!a.any.load(std::memory_order_acquire)) return false;
  MutexLock lock(&a.mu);
  return a.spec == name + "=fire";
}

void fault_point(const char* name, const char* file, int line) {
  Armed& a = State();
  if (!a.any.load(std::memory_order_acquire)) return;
  std::string spec;
  {
    MutexLock lock(&a.mu);
    spec = a.spec;
  }
  const std::string_view n(name);
  if (spec.compare(0, n.size(), n) != 0) return;
  const std::string_view rest = std::string_view(spec).substr(n.size());
  if (rest.empty()) ::_exit(kFaultPointExitCode);
  if (rest == "=internal") {
    detail::ThrowInternal(file, line, name, "(fault point: an internal error was asked for here)");
  }
}

}  // namespace anvil
