// The rank-to-anvild event lines: see rank_events.h.
#include "workers/rank_events.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "core/util/error.h"

namespace anvil::workers {

using nlohmann::json;

namespace {

double Num(const json& v) { return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>(); }

}  // namespace

std::string encode_rank_event(const WorkerEvent& e) {
  const train::StepMetrics& s = e.step_metrics;
  const train::EpochMetrics& p = e.epoch_metrics;
  json j = {{"kind", static_cast<int>(e.kind)},
            {"job_id", e.job_id},
            {"step", e.step},
            {"epoch", e.epoch},
            {"total_steps", e.total_steps},
            {"status_code", static_cast<int>(e.status.code())},
            {"status_message", std::string(e.status.message())},
            {"message", e.message},
            {"detail", e.detail},
            {"path", e.path},
            {"input_shape", std::vector<int64_t>(e.input_shape.begin(), e.input_shape.end())},
            {"output_shape", std::vector<int64_t>(e.output_shape.begin(), e.output_shape.end())},
            {"input_dtype", static_cast<int>(e.input_dtype)},
            {"labels", e.labels},
            {"parameters", e.parameters},
            {"spec_json", e.spec_json}};
  if (e.kind == WorkerEvent::Kind::kStep) {
    j["s"] = {{"step", s.step},
              {"epoch", s.epoch},
              {"loss", s.loss},
              {"grad_norm", s.grad_norm},
              {"lr", s.lr},
              {"samples_per_second", s.samples_per_second},
              {"data_wait_ratio", s.data_wait_ratio},
              {"step_seconds", s.step_seconds},
              {"loss_scale", s.loss_scale},
              {"skipped_steps", s.skipped_steps},
              {"rank_step_seconds", s.rank_step_seconds},
              {"rank_data_wait", s.rank_data_wait},
              {"rank_compute_seconds", s.rank_compute_seconds}};
  }
  if (e.kind == WorkerEvent::Kind::kFinding) {
    const train::Finding& f = e.finding;
    json evidence = json::array();
    for (const auto& [name, value] : f.evidence) evidence.push_back({name, value});
    j["f"] = {{"code", f.code},
              {"severity", static_cast<int>(f.severity)},
              {"first_step", f.first_step},
              {"last_step", f.last_step},
              {"evidence", evidence},
              {"advice", f.advice}};
  }
  if (e.kind == WorkerEvent::Kind::kChecked) j["c"] = e.checked;
  if (e.kind == WorkerEvent::Kind::kEpoch) {
    j["p"] = {{"epoch", p.epoch}, {"step", p.step}, {"train_loss", p.train_loss}, {"improved", p.improved}};
    if (p.val_loss) j["p"]["val_loss"] = *p.val_loss;
    if (p.val_accuracy) j["p"]["val_accuracy"] = *p.val_accuracy;
  }
  // Non-finite doubles have no JSON form: they are written as null and read back as NaN.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

WorkerEvent decode_rank_event(const std::string& line) {
  const json j = json::parse(line);
  WorkerEvent e;
  const int kind = j.at("kind").get<int>();
  ANVIL_CHECK(kind >= 0 && kind <= static_cast<int>(WorkerEvent::Kind::kChecked), "rank event: a kind is 0..",
              static_cast<int>(WorkerEvent::Kind::kChecked), ", got ", kind);
  e.kind = static_cast<WorkerEvent::Kind>(kind);
  e.job_id = j.at("job_id").get<std::string>();
  e.step = j.at("step").get<int64_t>();
  e.epoch = j.at("epoch").get<int64_t>();
  e.total_steps = j.at("total_steps").get<int64_t>();
  const int code = j.at("status_code").get<int>();
  if (code != 0)
    e.status = absl::Status(static_cast<absl::StatusCode>(code), j.at("status_message").get<std::string>());
  e.message = j.at("message").get<std::string>();
  e.detail = j.at("detail").get<std::string>();
  e.path = j.at("path").get<std::string>();
  for (int64_t d : j.at("input_shape").get<std::vector<int64_t>>()) e.input_shape.push_back(d);
  for (int64_t d : j.at("output_shape").get<std::vector<int64_t>>()) e.output_shape.push_back(d);
  e.input_dtype = static_cast<ScalarType>(j.at("input_dtype").get<int>());
  e.labels = j.at("labels").get<std::vector<std::string>>();
  e.parameters = j.at("parameters").get<int64_t>();
  e.spec_json = j.at("spec_json").get<std::string>();
  if (j.contains("s")) {
    const json& s = j["s"];
    train::StepMetrics& m = e.step_metrics;
    m.step = s.at("step").get<int64_t>();
    m.epoch = s.at("epoch").get<int64_t>();
    m.loss = Num(s.at("loss"));
    m.grad_norm = Num(s.at("grad_norm"));
    m.lr = Num(s.at("lr"));
    m.samples_per_second = Num(s.at("samples_per_second"));
    m.data_wait_ratio = Num(s.at("data_wait_ratio"));
    m.step_seconds = Num(s.at("step_seconds"));
    m.loss_scale = Num(s.at("loss_scale"));
    m.skipped_steps = s.at("skipped_steps").get<int64_t>();
    m.rank_step_seconds = s.at("rank_step_seconds").get<std::vector<double>>();
    m.rank_data_wait = s.at("rank_data_wait").get<std::vector<double>>();
    m.rank_compute_seconds = s.at("rank_compute_seconds").get<std::vector<double>>();
  }
  if (j.contains("c")) e.checked = j["c"].get<std::vector<std::string>>();
  if (j.contains("f")) {
    const json& f = j["f"];
    train::Finding& out = e.finding;
    out.code = f.at("code").get<std::string>();
    const int severity = f.at("severity").get<int>();
    ANVIL_CHECK(severity >= 0 && severity <= static_cast<int>(train::Severity::kCritical),
                "rank event: a finding's severity is 0..2, got ", severity);
    out.severity = static_cast<train::Severity>(severity);
    out.first_step = f.at("first_step").get<int64_t>();
    out.last_step = f.at("last_step").get<int64_t>();
    for (const json& item : f.at("evidence")) out.evidence.emplace_back(item.at(0).get<std::string>(), Num(item.at(1)));
    out.advice = f.at("advice").get<std::string>();
  }
  if (j.contains("p")) {
    const json& p = j["p"];
    train::EpochMetrics& m = e.epoch_metrics;
    m.epoch = p.at("epoch").get<int64_t>();
    m.step = p.at("step").get<int64_t>();
    m.train_loss = Num(p.at("train_loss"));
    m.improved = p.at("improved").get<bool>();
    if (p.contains("val_loss")) m.val_loss = Num(p["val_loss"]);
    if (p.contains("val_accuracy")) m.val_accuracy = Num(p["val_accuracy"]);
  }
  return e;
}

}  // namespace anvil::workers
