#include "workers/status.h"

#include <new>

#include "core/util/error.h"

namespace anvil::workers {

absl::Status engine_exception_status(absl::StatusCode engine_code) {
  try {
    throw;
  } catch (const InternalError& e) {
    return absl::InternalError(e.what());
  } catch (const OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(e.what());
  } catch (const Error& e) {
    return absl::Status(engine_code, e.what());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory");
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("internal error: ") + e.what());
  } catch (...) {
    return absl::InternalError("internal error: unknown exception");
  }
}

}  // namespace anvil::workers
