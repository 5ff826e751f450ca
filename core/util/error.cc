#include "core/util/error.h"

namespace anvil::detail {

void ThrowInternal(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(StrCat("internal error at ", file, ":", line, ": ", cond, " failed. ", msg,
                             " (this is a bug in Anvil; please report it)"));
}

}  // namespace anvil::detail
