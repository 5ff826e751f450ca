// `anvil doctor ID`: the training doctor's findings on a job (docs/doctor.md).
#include <cstdio>
#include <memory>

#include "client/commands/commands.h"

namespace anvil::client {
namespace {

int RunDoctor(Context& cli, const std::string& job_id) {
  v1::GetFindingsRequest req;
  req.set_job_id(job_id);
  v1::GetFindingsResponse resp;
  check(cli.training->GetFindings(cli.call().get(), req, &resp), "doctor " + job_id);
  if (cli.json) {
    std::printf("%s\n", to_json(resp).c_str());
    return 0;
  }
  if (resp.findings().empty()) std::printf("%s: no findings\n", job_id.c_str());
  for (const v1::Finding& f : resp.findings()) {
    std::printf("%-8s %s  (steps %lld-%lld)\n", f.severity().c_str(), f.code().c_str(),
                static_cast<long long>(f.first_step()), static_cast<long long>(f.last_step()));
    std::string evidence;
    for (const v1::FindingEvidence& e : f.evidence()) {
      char cell[96];
      std::snprintf(cell, sizeof(cell), "%s%s %.4g", evidence.empty() ? "" : ", ", e.name().c_str(), e.value());
      evidence += cell;
    }
    std::printf("  evidence: %s\n  advice:   %s\n", evidence.c_str(), f.advice().c_str());
  }
  std::string healthy;
  for (const std::string& h : resp.healthy()) healthy += (healthy.empty() ? "" : ", ") + h;
  std::printf("checked and healthy: %s\n", healthy.empty() ? "(none)" : healthy.c_str());
  // Rules that apply but have not had what they need: not a clean bill, so named apart.
  if (!resp.not_checked().empty()) std::printf("not checked yet (too little to go on):\n");
  for (const v1::UncheckedRule& u : resp.not_checked())
    std::printf("  %-30s needs %s\n", u.code().c_str(), u.needs().c_str());
  return 0;
}

}  // namespace

CommandAction doctor_command(CLI::App& cmd) {
  auto id = std::make_shared<std::string>();
  cmd.add_option("id", *id)->required();
  return [id](Context& cli) { return RunDoctor(cli, *id); };
}

}  // namespace anvil::client
