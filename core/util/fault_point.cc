#include "core/util/fault_point.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace anvil {

void fault_point(const char* name) {
  const char* wanted = std::getenv("ANVIL_FAULT_POINT");
  if (wanted != nullptr && std::strcmp(wanted, name) == 0) ::_exit(kFaultPointExitCode);
}

}  // namespace anvil
