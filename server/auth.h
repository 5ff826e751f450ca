// Who may call what: a bearer token ("authorization: Bearer anvil_...") with the scope the
// method needs (server/tokens.h). Health checks stay open; everything else goes through
// authorize() first, inside the method's error guard.
//   UNAUTHENTICATED    no token, a malformed header, or a token the server does not know
//   PERMISSION_DENIED  a known token without the scope the method needs
#pragma once

#include <grpcpp/server_context.h>

#include <optional>

#include "server/tokens.h"

namespace anvil::server {

// `tokens` null or without tokens: everything is allowed. `needed` nullopt: any valid token.
void authorize(TokenSet* tokens, const grpc::ServerContextBase& ctx, std::optional<Scope> needed, const char* method);

}  // namespace anvil::server
