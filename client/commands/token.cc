// `anvil token create|list|revoke`: bearer tokens, managed on the server's machine in its
// token file, which anvild re-reads on its own; so no server call (docs/security.md).
#include <cstdio>
#include <memory>
#include <sstream>
#include <vector>

#include "client/commands/commands.h"
#include "client/exit_codes.h"
#include "server/tokens.h"

namespace anvil::client {
namespace {

struct TokenArgs {
  std::string name, scopes = "train,serve", file, data_dir = "anvil-data";
};

void CreateToken(const std::string& file, const TokenArgs& a) {
  std::vector<server::Scope> scopes;
  std::stringstream list(a.scopes);
  for (std::string s; std::getline(list, s, ',');) scopes.push_back(server::parse_scope(s));
  std::printf("%s\n", server::create_token(file, a.name, scopes).c_str());
  std::fprintf(stderr,
               "token \"%s\" (%s) added to %s; anvild takes it up within a second. It is shown only "
               "now: pass it with --token or $ANVIL_TOKEN.\n",
               a.name.c_str(), a.scopes.c_str(), file.c_str());
}

void ListTokens(const std::string& file) {
  for (const server::TokenEntry& e : server::read_token_file(file)) {
    std::string scopes;
    for (server::Scope s : e.scopes) {
      // Appended piece by piece: GCC 12 at -O3 misreads `"," + std::string` as an overlapping copy.
      if (!scopes.empty()) scopes += ',';
      scopes += server::scope_name(s);
    }
    std::printf("%-24s %s\n", e.name.c_str(), scopes.c_str());
  }
}

void RevokeToken(const std::string& file, const std::string& name) {
  if (!server::revoke_token(file, name)) throw Failure(kExitNotFound, "token \"" + name + "\" is not in " + file);
}

}  // namespace

CommandAction token_command(CLI::App& cmd) {
  auto a = std::make_shared<TokenArgs>();
  cmd.require_subcommand(1);
  cmd.add_option("--data-dir", a->data_dir, "anvild's data dir (the file is <data-dir>/tokens.json)");
  cmd.add_option("--tokens", a->file, "the token file itself (anvild --tokens)");
  CLI::App* create = cmd.add_subcommand("create", "add a token and print it (shown only this once)");
  create->add_option("--name", a->name, "a name for the token (to list or revoke it)")->required();
  create->add_option("--scope", a->scopes, "comma-separated: train, serve, admin (default train,serve)");
  CLI::App* list = cmd.add_subcommand("list", "list the tokens' names and scopes");
  CLI::App* revoke = cmd.add_subcommand("revoke", "remove a token");
  revoke->add_option("name", a->name)->required();
  for (CLI::App* sub : {create, list, revoke}) sub->fallthrough();  // --data-dir after the verb
  return [a, create, list](Context&) {
    const std::string file = a->file.empty() ? a->data_dir + "/tokens.json" : a->file;
    if (create->parsed()) {
      CreateToken(file, *a);
    } else if (list->parsed()) {
      ListTokens(file);
    } else {
      RevokeToken(file, a->name);
    }
    return 0;
  };
}

}  // namespace anvil::client
