// The CLI's subcommands. Each `*_command` declares one subcommand's arguments and flags on
// the CLI11 app it is given and returns the action that runs it once they are parsed;
// client/anvil.cc lists them, with their one-line help, in the table `anvil --help` prints.
// The variables CLI11 parses into are held (by shared_ptr) in the returned action, so they
// stay at one address after the declaring function returns.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "client/commands/context.h"

namespace anvil::client {

// Runs a parsed subcommand; returns the exit code (client/exit_codes.h), or throws Failure.
using CommandAction = std::function<int(Context&)>;

// Jobs (client/commands/jobs.cc, watch.cc, doctor.cc).
CommandAction submit_command(CLI::App& cmd);
CommandAction jobs_command(CLI::App& cmd);
CommandAction delete_command(CLI::App& cmd);
CommandAction job_command(CLI::App& cmd);
CommandAction watch_command(CLI::App& cmd);
CommandAction cancel_command(CLI::App& cmd);
CommandAction doctor_command(CLI::App& cmd);

// Models (client/commands/models.cc, quantize.cc, predict.cc, export.cc).
CommandAction models_command(CLI::App& cmd);  // and `models add`
CommandAction model_command(CLI::App& cmd);
CommandAction quantize_command(CLI::App& cmd);
CommandAction predict_command(CLI::App& cmd);
CommandAction export_command(CLI::App& cmd);

// The server (client/commands/health.cc) and its token file (client/commands/token.cc).
CommandAction health_command(CLI::App& cmd);
CommandAction token_command(CLI::App& cmd);

}  // namespace anvil::client
