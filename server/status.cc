#include "server/status.h"

#include <absl/status/status.h>

#include "core/util/utf8.h"
#include "server/artifacts/artifact_store.h"
#include "server/store.h"

namespace anvil::server {

absl::Status current_exception_status(absl::StatusCode engine_code) {
  try {
    throw;
  } catch (const ServiceError& e) {
    return e.status();
  } catch (const StoreError& e) {
    switch (e.kind()) {
      case StoreError::Kind::kFull:
        return absl::ResourceExhaustedError(std::string("the server's disk is full: ") + e.what());
      case StoreError::Kind::kIo:
        return absl::UnavailableError(std::string("the server cannot reach its store: ") + e.what());
      case StoreError::Kind::kFenced:
        return absl::AbortedError(e.what());
      case StoreError::Kind::kOther:
        break;
    }
    return absl::InternalError(e.what());
  } catch (const ArtifactError& e) {
    switch (e.kind()) {
      case ArtifactError::Kind::kCorrupt:
      case ArtifactError::Kind::kNotFound:
        return absl::DataLossError(e.what());
      case ArtifactError::Kind::kUnavailable:
        return absl::UnavailableError(std::string("the server cannot reach its artifact store: ") + e.what());
      case ArtifactError::Kind::kExists:
        return absl::AbortedError(e.what());
      case ArtifactError::Kind::kOther:
        break;
    }
    return absl::InternalError(e.what());
  } catch (...) {
    return workers::engine_exception_status(engine_code);
  }
}

grpc::Status to_grpc(const absl::Status& status, const std::vector<std::string>& roots) {
  if (status.ok()) return grpc::Status::OK;
  // gRPC's clients decode the message as UTF-8 (Python's raises on anything else).
  std::string message = to_valid_utf8(std::string_view(status.message().data(), status.message().size()));
  for (const std::string& root : roots) message = scrub_paths(std::move(message), root);
  if (message.size() > kMaxStatusMessageBytes) message = echo(message, kMaxStatusMessageBytes);
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

std::string status_code_name(absl::StatusCode code) {
  const std::string name = absl::StatusCodeToString(code);
  return name.empty() ? "CODE_" + std::to_string(static_cast<int>(code)) : name;
}

std::string grpc_code_name(grpc::StatusCode code) {
  // gRPC's codes are absl::StatusCode's, number for number; Abseil names them.
  return status_code_name(static_cast<absl::StatusCode>(code));
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
