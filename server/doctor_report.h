// A job's training-doctor report as GetFindings answers it (docs/doctor.md): the findings (each
// code once, at its highest severity: FindingSet), the rules checked that did not fire
// (healthy), and the rules that apply to the job but have not yet had what they need to decide
// (not checked, each with what it needs). A rule counts as checked once any run of the job
// recorded it so (the worker's kChecked events, stored as "checked" metric rows); STALLED, the
// scheduler's watchdog, once the job has started. Rules that do not apply to the job (a loss,
// a precision or a world size they do not concern) are in no list.
//
// Thread-safety: a pure function of the store's rows (Store is thread-safe).
#pragma once

#include "proto/anvil/v1/anvil.pb.h"
#include "server/store.h"

namespace anvil::server {

v1::GetFindingsResponse doctor_report(const Store& store, const JobRow& row);

}  // namespace anvil::server
