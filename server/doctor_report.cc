#include "server/doctor_report.h"

#include <google/protobuf/util/json_util.h>

#include <set>
#include <string>

#include "core/train/doctor.h"
#include "core/util/utf8.h"
#include "server/finding_set.h"
#include "workers/job_steps.h"

namespace anvil::server {

namespace {

// The stored events of one kind that parse (a row written by another version may not).
template <typename F>
void ForEachEvent(const Store& store, const std::string& job_id, const std::string& kind, const F& f) {
  for (const MetricRow& m : store.metrics_of_kind(job_id, kind)) {
    v1::MetricEvent e;
    if (google::protobuf::util::JsonStringToMessage(to_valid_utf8(m.payload_json), &e).ok()) f(e);
  }
}

}  // namespace

v1::GetFindingsResponse doctor_report(const Store& store, const JobRow& row) {
  v1::GetFindingsResponse resp;
  FindingSet findings;
  ForEachEvent(store, row.id, "finding", [&](const v1::MetricEvent& e) {
    if (e.has_finding()) findings.add(e.finding());
  });
  for (v1::Finding& f : findings.sorted()) *resp.add_findings() = std::move(f);

  std::set<std::string> checked;
  ForEachEvent(store, row.id, "checked", [&](const v1::MetricEvent& e) {
    for (const std::string& code : e.checked().codes()) checked.insert(code);
  });
  if (row.started_ms > 0) checked.insert("STALLED");
  v1::JobSpec spec;
  if (!google::protobuf::util::JsonStringToMessage(to_valid_utf8(row.spec_json), &spec).ok()) spec.Clear();
  const bool data_parallel = spec.world_size() > 1;
  // The device does not change which rules apply; the context's other fields do.
  const train::DoctorContext context = workers::doctor_context(spec, kCPU);
  const train::DoctorOptions options = workers::doctor_options(spec);
  for (const std::string& rule : train::Doctor::rules()) {
    if (findings.has(rule) || !train::Doctor::applies(rule, context, data_parallel)) continue;
    if (checked.count(rule) != 0) {
      resp.add_healthy(rule);
    } else {
      v1::UncheckedRule* u = resp.add_not_checked();
      u->set_code(rule);
      u->set_needs(train::Doctor::needs(rule, options));
    }
  }
  return resp;
}

}  // namespace anvil::server
