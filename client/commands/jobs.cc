// The job subcommands: submit, jobs, delete, job, cancel (watch: watch.cc; doctor: doctor.cc).
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "client/commands/commands.h"
#include "client/commands/print.h"
#include "client/commands/watch.h"
#include "client/exit_codes.h"

namespace anvil::client {
namespace {

struct SubmitArgs {
  std::string spec_path;
  bool watch = false, dry_run = false;
};

int RunSubmit(Context& cli, const SubmitArgs& a) {
  std::ifstream in(a.spec_path);
  if (!in) throw Failure(kExitBadInput, "cannot read \"" + a.spec_path + "\": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  v1::SubmitJobRequest req;
  const auto parsed = google::protobuf::util::JsonStringToMessage(text.str(), req.mutable_spec());
  if (!parsed.ok())
    throw Failure(kExitBadInput, a.spec_path + ": not a valid JobSpec: " + std::string(parsed.message()));
  req.set_dry_run(a.dry_run);
  v1::SubmitJobResponse resp;
  check(cli.training->SubmitJob(cli.call().get(), req, &resp), "submit");
  if (cli.json) {
    std::printf("%s\n", to_json(resp).c_str());
  } else if (a.dry_run) {
    std::printf("spec is valid:\n%s\n", to_json(resp.job().spec()).c_str());
  } else {
    std::printf("%s job %s (%s)\n", resp.created() ? "submitted" : "already submitted:", resp.job().id().c_str(),
                resp.job().name().c_str());
  }
  if (a.watch && !a.dry_run) {
    const v1::JobState end = follow_job(cli, resp.job().id(), 0);
    v1::GetJobRequest g;
    g.set_job_id(resp.job().id());
    v1::Job final_job;
    check(cli.training->GetJob(cli.call().get(), g, &final_job), "job");
    if (!cli.json) print_job(final_job);
    return end == v1::SUCCEEDED ? kExitOk : kExitJobDidNotSucceed;
  }
  return 0;
}

struct JobsArgs {
  std::string state_filter;
  int64_t limit = 0;
};

int RunJobs(Context& cli, const JobsArgs& a) {
  v1::ListJobsRequest req;
  if (!a.state_filter.empty()) {
    std::string upper = a.state_filter;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    v1::JobState s;
    if (!v1::JobState_Parse(upper, &s) || s == v1::JOB_STATE_UNSPECIFIED) {
      throw Failure(kExitBadInput,
                    "--state: expected QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED or "
                    "INTERRUPTED, got \"" +
                        a.state_filter + "\"");
    }
    req.add_states(s);
  }
  // Every page (or up to --limit jobs), joined into one reply for --json.
  v1::ListJobsResponse resp;
  while (a.limit <= 0 || resp.jobs_size() < a.limit) {
    req.set_page_size(static_cast<int32_t>(a.limit > 0 ? std::min<int64_t>(1000, a.limit - resp.jobs_size()) : 1000));
    v1::ListJobsResponse page;
    check(cli.training->ListJobs(cli.call().get(), req, &page), "jobs");
    for (v1::Job& j : *page.mutable_jobs()) *resp.add_jobs() = std::move(j);
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  if (cli.json) {
    std::printf("%s\n", to_json(resp).c_str());
  } else {
    for (const v1::Job& j : resp.jobs()) print_job(j);
    if (resp.jobs_size() == 0)
      std::printf(a.state_filter.empty() ? "no jobs\n" : "no %s jobs\n", a.state_filter.c_str());
  }
  return 0;
}

int RunDelete(Context& cli, const std::string& job_id) {
  v1::DeleteJobRequest req;
  req.set_job_id(job_id);
  v1::DeleteJobResponse resp;
  check(cli.training->DeleteJob(cli.call().get(), req, &resp), "delete " + job_id);
  if (!cli.json)
    std::printf("deleted %s\n", job_id.c_str());
  else
    std::printf("{}\n");
  return 0;
}

int RunJob(Context& cli, const std::string& job_id) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::Job resp;
  check(cli.training->GetJob(cli.call().get(), req, &resp), "job " + job_id);
  if (cli.json)
    std::printf("%s\n", to_json(resp).c_str());
  else
    print_job_summary(resp);
  return 0;
}

int RunCancel(Context& cli, const std::string& job_id) {
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  v1::Job resp;
  check(cli.training->CancelJob(cli.call().get(), req, &resp), "cancel " + job_id);
  if (cli.json)
    std::printf("%s\n", to_json(resp).c_str());
  else
    std::printf("cancelling %s\n", job_id.c_str());
  return 0;
}

// The subcommands that take only a job's ID.
CommandAction JobIdCommand(CLI::App& cmd, int (*run)(Context&, const std::string&)) {
  auto id = std::make_shared<std::string>();
  cmd.add_option("id", *id)->required();
  return [id, run](Context& cli) { return run(cli, *id); };
}

}  // namespace

CommandAction submit_command(CLI::App& cmd) {
  auto a = std::make_shared<SubmitArgs>();
  cmd.add_option("spec", a->spec_path, "JobSpec as JSON (protobuf JSON mapping)")->required();
  cmd.add_flag("--watch", a->watch, "follow the job until it ends");
  cmd.add_flag("--dry-run", a->dry_run, "validate only");
  return [a](Context& cli) { return RunSubmit(cli, *a); };
}

CommandAction jobs_command(CLI::App& cmd) {
  auto a = std::make_shared<JobsArgs>();
  cmd.add_option("--state", a->state_filter, "QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED or INTERRUPTED (any case)");
  cmd.add_option("--limit", a->limit, "at most this many, newest first (default: all, read a page at a time)")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  return [a](Context& cli) { return RunJobs(cli, *a); };
}

CommandAction delete_command(CLI::App& cmd) { return JobIdCommand(cmd, RunDelete); }
CommandAction job_command(CLI::App& cmd) { return JobIdCommand(cmd, RunJob); }
CommandAction cancel_command(CLI::App& cmd) { return JobIdCommand(cmd, RunCancel); }

}  // namespace anvil::client
