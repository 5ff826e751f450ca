#include "server/auth.h"

#include "server/status.h"

namespace anvil::server {

using grpc::StatusCode;

void authorize(TokenSet* tokens, const grpc::ServerContextBase& ctx, std::optional<Scope> needed, const char* method) {
  if (tokens == nullptr || !tokens->enabled()) return;
  const std::string file_error = tokens->error();
  ANVIL_SERVICE_CHECK(file_error.empty(), StatusCode::UNAUTHENTICATED,
                      "the server cannot read its token file, so no token is accepted; its operator must fix it");
  const auto& metadata = ctx.client_metadata();
  const auto it = metadata.find("authorization");
  ANVIL_SERVICE_CHECK(it != metadata.end(), StatusCode::UNAUTHENTICATED, method,
                      ": expected a bearer token (metadata \"authorization: Bearer <token>\"; anvil --token or "
                      "$ANVIL_TOKEN), got none");
  const std::string header(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  ANVIL_SERVICE_CHECK(header.rfind(kBearer, 0) == 0, StatusCode::UNAUTHENTICATED, method,
                      ": expected \"authorization: Bearer <token>\", got another scheme");
  const std::optional<TokenEntry> entry = tokens->find(header.substr(kBearer.size()));
  ANVIL_SERVICE_CHECK(entry.has_value(), StatusCode::UNAUTHENTICATED, method,
                      ": the token is not valid (unknown or revoked)");
  ANVIL_SERVICE_CHECK(!needed || entry->allows(*needed), StatusCode::PERMISSION_DENIED, method, ": token \"",
                      entry->name, "\" lacks the \"", scope_name(*needed), "\" scope");
}

}  // namespace anvil::server
