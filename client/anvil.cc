// anvil: the command-line client of anvild.
//
//   anvil [--server HOST:PORT] [--json] [--token T] [--tls-...] COMMAND ...
//
// The subcommands are listed once, in kCommands below: `anvil --help` prints that list, and
// Run dispatches on it. Each one's arguments and code live in client/commands/.
// Exit codes: one table, client/exit_codes.h (also in `anvil --help`).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>
#include <vector>

#include "client/commands/commands.h"
#include "client/commands/context.h"
#include "client/exit_codes.h"

namespace {

using namespace anvil::client;

struct Command {
  const char* name;
  const char* help;  // the line `anvil --help` shows for it
  CommandAction (*declare)(CLI::App& cmd);
  bool connects;  // false: works on local files only, so a missing server does not stop it
};

// In the order `anvil --help` lists them.
const Command kCommands[] = {
    {"submit", "submit a training job from a JSON spec file", submit_command, true},
    {"jobs", "list jobs, newest first", jobs_command, true},
    {"delete", "delete a finished job with its metrics and files (not its model)", delete_command, true},
    {"job", "show one job", job_command, true},
    {"watch", "follow a job's progress until it ends", watch_command, true},
    {"cancel", "cancel a job", cancel_command, true},
    {"doctor", "the training doctor's findings on a job: evidence and advice, most severe first", doctor_command, true},
    {"models", "list served models (models add: register an ONNX file)", models_command, true},
    {"model", "show a model's signature", model_command, true},
    {"quantize", "quantize a model to int8; the new version is registered if it passes the accuracy gate",
     quantize_command, true},
    {"predict", "run a model on inputs from a file", predict_command, true},
    {"export", "download a model file", export_command, true},
    {"health", "check that the server is serving", health_command, true},
    {"token", "create, list or revoke bearer tokens in anvild's token file", token_command, false},
};

int Run(int argc, char** argv) {
  Context cli;
  CLI::App app{"anvil: submit training jobs to anvild, watch them, and use the models they produce"};
  // Subcommands inherit these two from the app when they are added, so they come first.
  app.require_subcommand(1);
  app.footer(exit_code_table());
  app.add_option("--server", cli.server,
                 "anvild address (default 127.0.0.1:50051, or $ANVIL_SERVER); replicas: HOST:PORT,HOST:PORT,... or "
                 "dns:///NAME:PORT (calls spread round-robin over the healthy ones, safe ones retried)")
      ->envname("ANVIL_SERVER");
  app.add_flag("--json", cli.json, "machine-readable output");
  app.add_option("--token", cli.token, "bearer token for a server that requires one (or $ANVIL_TOKEN)")
      ->envname("ANVIL_TOKEN");
  app.add_option("--tls-ca", cli.tls_ca, "connect over TLS, trusting this CA (PEM) for the server's certificate")
      ->envname("ANVIL_TLS_CA");
  app.add_option("--tls-cert", cli.tls_cert, "mutual TLS: this client's certificate (PEM)")->envname("ANVIL_TLS_CERT");
  app.add_option("--tls-key", cli.tls_key, "mutual TLS: this client's private key (PEM)")->envname("ANVIL_TLS_KEY");
  app.add_option("--tls-server-name", cli.tls_server_name, "the name on the server's certificate, if not the host");

  std::vector<std::pair<CLI::App*, CommandAction>> actions;
  for (const Command& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    actions.emplace_back(sub, c.declare(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitBadInput;
  }
  for (size_t i = 0; i < actions.size(); ++i) {
    if (!actions[i].first->parsed()) continue;
    if (kCommands[i].connects) cli.connect();
    return actions[i].second(cli);
  }
  return kExitBadInput;  // not reached: the parse requires one subcommand
}

}  // namespace

int main(int argc, char** argv) {
  // The engine's start-up line (the CPU and kernels it chose) is for servers and programs that
  // train; a client that decodes an image locally has nothing to say about it. An explicit
  // ANVIL_LOG_LEVEL still shows it.
  ::setenv("ANVIL_LOG_LEVEL", "warning", /*overwrite=*/0);
  try {
    return Run(argc, argv);
  } catch (const Failure& f) {
    std::fprintf(stderr, "anvil: %s\n", f.what());
    return f.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "anvil: %s\n", e.what());
    return 1;
  }
}
