#include "core/util/fault_point.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/util/error.h"

namespace anvil {

void fault_point(const char* name, std::source_location where) {
  const char* wanted = std::getenv("ANVIL_FAULT_POINT");
  if (wanted == nullptr) return;
  const size_t n = std::strlen(name);
  if (std::strncmp(wanted, name, n) != 0) return;
  if (wanted[n] == '\0') ::_exit(kFaultPointExitCode);
  if (std::strcmp(wanted + n, "=internal") == 0) {
    detail::ThrowInternal(where.file_name(), static_cast<int>(where.line()), name,
                          "(fault point: ANVIL_FAULT_POINT asked for an internal error here)");
  }
}

}  // namespace anvil
