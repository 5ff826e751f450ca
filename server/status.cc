#include "server/status.h"

#include <absl/status/status.h>

#include "server/store.h"

namespace anvil::server {

grpc::Status current_exception_status(grpc::StatusCode engine_code) {
  try {
    throw;
  } catch (const ServiceError& e) {
    return grpc::Status(e.code(), e.what());
  } catch (const StoreError& e) {
    switch (e.kind()) {
      case StoreError::Kind::kFull:
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            std::string("the server's disk is full: ") + e.what());
      case StoreError::Kind::kIo:
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            std::string("the server cannot reach its store: ") + e.what());
      case StoreError::Kind::kOther:
        break;
    }
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  } catch (const anvil::InternalError& e) {
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what());  // a bug of the server's, not the request's
  } catch (const anvil::OutOfMemoryError& e) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, e.what());
  } catch (const anvil::Error& e) {
    return grpc::Status(engine_code, e.what());
  } catch (const std::bad_alloc&) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return grpc::Status(grpc::StatusCode::INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "internal error: unknown exception");
  }
}

std::string grpc_code_name(grpc::StatusCode code) {
  // gRPC's codes are absl::StatusCode's, number for number; Abseil names them.
  const std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "CODE_" + std::to_string(static_cast<int>(code)) : name;
}

std::string echo(std::string_view value, size_t max) {
  if (value.size() <= max) return std::string(value);
  size_t cut = max >= 3 ? max - 3 : 0;  // room for the three bytes of "…"
  // Back off continuation bytes (10xxxxxx): never split a UTF-8 sequence.
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;
  return std::string(value.substr(0, cut)) + "\u2026";
}

std::string scrub_paths(std::string message, const std::string& root) {
  if (root.empty()) return message;
  for (size_t at = message.find(root); at != std::string::npos; at = message.find(root, at)) {
    message.replace(at, root.size(), "<data>");
  }
  return message;
}

}  // namespace anvil::server
