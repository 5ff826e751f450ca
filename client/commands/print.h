// The CLI's readable (not --json) forms of jobs and models, shared by the subcommands that
// show them.
#pragma once

#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::client {

// One line of `anvil jobs`, and the last line of `anvil submit --watch`.
void print_job(const v1::Job& j);

// `anvil job ID`: the facts a person looks for, one per line.
void print_job_summary(const v1::Job& j);

// `anvil model NAME`, and the model `models add` and `quantize` registered.
void print_model_summary(const v1::Model& m);

}  // namespace anvil::client
