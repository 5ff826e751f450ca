#include "server/auth.h"

#include "server/status.h"

namespace anvil::server {

void authorize(TokenSet* tokens, const grpc::ServerContextBase& ctx, std::optional<Scope> needed, const char* method) {
  if (tokens == nullptr) return;
  const auto& metadata = ctx.client_metadata();
  const auto it = metadata.find("authorization");
  const std::string header = it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  const bool bearer = header.rfind(kBearer, 0) == 0;
  const std::string token = bearer ? header.substr(kBearer.size()) : "";
  const TokenSet::Verdict v = tokens->check(bearer ? &token : nullptr);
  if (!v.required) return;
  ANVIL_SERVICE_CHECK(v.file_error.empty(), absl::StatusCode::kUnauthenticated,
                      "the server cannot read its token file, so no token is accepted; its operator must fix it");
  ANVIL_SERVICE_CHECK(it != metadata.end(), absl::StatusCode::kUnauthenticated, method,
                      ": expected a bearer token (metadata \"authorization: Bearer <token>\"; anvil --token or "
                      "$ANVIL_TOKEN), got none");
  ANVIL_SERVICE_CHECK(bearer, absl::StatusCode::kUnauthenticated, method,
                      ": expected \"authorization: Bearer <token>\", got another scheme");
  ANVIL_SERVICE_CHECK(v.entry.has_value(), absl::StatusCode::kUnauthenticated, method,
                      ": the token is not valid (unknown or revoked)");
  ANVIL_SERVICE_CHECK(!needed || v.entry->allows(*needed), absl::StatusCode::kPermissionDenied, method, ": token \"",
                      v.entry->name, "\" lacks the \"", scope_name(*needed), "\" scope");
}

}  // namespace anvil::server
