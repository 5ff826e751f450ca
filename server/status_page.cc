#include "server/status_page.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/util/utf8.h"

namespace anvil::server {
namespace {

using Json = nlohmann::json;

// protobuf's JSON writes int64 as strings.
double Number(const Json& j, const char* key) {
  if (!j.contains(key)) return 0;
  const Json& v = j[key];
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return std::stod(v.get<std::string>());
  return 0;
}

Json ToJson(const std::vector<std::pair<int64_t, double>>& points) {
  Json out = Json::array();
  for (const auto& [step, value] : points) out.push_back({step, value});
  return out;
}

}  // namespace

void DownsampledSeries::add(int64_t step, double value) {
  if (count_ % stride_ == 0) {
    kept_.emplace_back(step, value);
    // One place stays for the newest point: past it, every other point goes and the stride doubles.
    if (kept_.size() > max_points_ - 1) {
      size_t j = 0;
      for (size_t i = 0; i < kept_.size(); i += 2) kept_[j++] = kept_[i];
      kept_.resize(j);
      stride_ *= 2;
    }
  }
  ++count_;
  last_ = {step, value};
}

std::vector<std::pair<int64_t, double>> DownsampledSeries::points() const {
  std::vector<std::pair<int64_t, double>> out = kept_;
  if (count_ > 0 && (out.empty() || out.back().first != last_.first)) out.push_back(last_);
  return out;
}

const std::vector<std::string>& StatusPage::series_names() {
  static const std::vector<std::string> names = {"train_loss", "val_loss",           "val_accuracy",    "grad_norm",
                                                 "lr",         "samples_per_second", "data_wait_ratio", "loss_scale"};
  return names;
}

namespace {

// Indices into series_names().
enum SeriesIndex : size_t {
  kTrainLoss,
  kValLoss,
  kValAccuracy,
  kGradNorm,
  kLr,
  kSamplesPerSecond,
  kDataWait,
  kLossScale
};

Json FindingJson(const v1::Finding& f) {
  Json evidence = Json::object();
  for (const v1::FindingEvidence& e : f.evidence()) evidence[e.name()] = e.value();
  return {{"code", f.code()},           {"severity", f.severity()}, {"first_step", f.first_step()},
          {"last_step", f.last_step()}, {"evidence", evidence},     {"advice", f.advice()}};
}

}  // namespace

void StatusPage::Update(const std::string& job_id, Series& s) {
  constexpr int64_t kPage = 4096;
  while (true) {
    const std::vector<MetricRow> rows = store_.metrics(job_id, 0, s.after_seq, kPage);
    if (!rows.empty()) s.text.clear();
    for (const MetricRow& m : rows) {
      s.after_seq = m.seq;
      if (m.kind == "finding") {
        v1::MetricEvent e;
        if (google::protobuf::util::JsonStringToMessage(to_valid_utf8(m.payload_json), &e).ok() && e.has_finding())
          s.findings.add(e.finding());
        continue;
      }
      if (m.kind != "step" && m.kind != "epoch") continue;
      Json e = Json::parse(m.payload_json, nullptr, /*allow_exceptions=*/false);
      if (!e.is_object()) continue;
      if (e.contains("step_metrics")) {
        // A job resumed from a checkpoint replays steps it had run: start the series again.
        if (m.step <= s.series[kTrainLoss].last_step()) {
          s = Series(max_points_);
          return Update(job_id, s);
        }
        const Json& sm = e["step_metrics"];
        s.series[kTrainLoss].add(m.step, Number(sm, "loss"));
        s.series[kGradNorm].add(m.step, Number(sm, "grad_norm"));
        s.series[kLr].add(m.step, Number(sm, "lr"));
        s.series[kSamplesPerSecond].add(m.step, Number(sm, "samples_per_second"));
        s.series[kDataWait].add(m.step, Number(sm, "data_wait_ratio"));
        // 0: no loss scaling (a float32 or bfloat16 job), not a scale of zero.
        if (Number(sm, "loss_scale") > 0) s.series[kLossScale].add(m.step, Number(sm, "loss_scale"));
      }
      if (e.contains("epoch_metrics")) {
        const Json& em = e["epoch_metrics"];
        if (em.value("has_val_loss", false)) s.series[kValLoss].add(m.step, Number(em, "val_loss"));
        if (em.value("has_val_accuracy", false)) s.series[kValAccuracy].add(m.step, Number(em, "val_accuracy"));
      }
    }
    if (static_cast<int64_t>(rows.size()) < kPage) return;
  }
}

Json StatusPage::Models() const {
  Json out = Json::array();
  if (serving_ == nullptr) return out;
  // Newest versions first, grouped by name in the order each name's newest version came.
  constexpr int64_t kMaxRows = 500;
  constexpr size_t kMaxVersionsShown = 10;
  const std::vector<ModelRow> rows = store_.recent_models(kMaxRows);
  std::vector<std::string> names;
  std::map<std::string, std::vector<const ModelRow*>> versions;
  for (const ModelRow& r : rows) {
    auto& v = versions[r.name];
    if (v.empty()) names.push_back(r.name);
    if (v.size() < kMaxVersionsShown) v.push_back(&r);
  }
  for (const std::string& name : names) {
    if (static_cast<int64_t>(out.size()) >= max_models_) break;
    const metrics::ServingStats::Summary st = serving_->summary(name);
    Json vs = Json::array();
    for (const ModelRow* r : versions[name]) {
      auto p = st.precision.find(r->version);
      vs.push_back({{"version", r->version},
                    {"job_id", r->job_id},
                    {"created_ms", r->created_ms},
                    {"precision", p == st.precision.end() ? "" : p->second}});  // "": not loaded here
    }
    out.push_back({{"name", name},
                   {"versions", vs},
                   {"requests_per_second", st.requests_per_second},
                   {"p50_ms", st.p50_seconds * 1e3},
                   {"p99_ms", st.p99_seconds * 1e3},
                   {"requests", st.requests},
                   {"errors", st.errors},
                   {"requests_total", st.requests_total},
                   {"errors_total", st.errors_total},
                   {"batches", st.batches},
                   {"batch_rows_mean", st.batch_rows_mean},
                   {"batch_rows_max", st.batch_rows_max}});
  }
  return out;
}

std::string StatusPage::json() {
  MutexLock lock(&mu_);
  std::string jobs = "[";
  std::map<std::string, Series> kept;
  for (const JobRow& row : store_.list_jobs({}, max_jobs_)) {
    auto it = series_.find(row.id);
    Series s = it != series_.end() ? std::move(it->second) : Series(max_points_);
    Update(row.id, s);
    if (s.text.empty()) {
      Json members = Json::object();
      for (size_t i = 0; i < s.series.size(); ++i) members[series_names()[i]] = ToJson(s.series[i].points());
      Json findings = Json::array();
      for (const v1::Finding& f : s.findings.sorted()) findings.push_back(FindingJson(f));
      members["findings"] = std::move(findings);
      s.text = members.dump(-1, ' ', false, Json::error_handler_t::replace);
      s.text = s.text.substr(1, s.text.size() - 2);  // the members, spliced into the job's object below
    }
    Json spec = Json::parse(to_valid_utf8(row.spec_json), nullptr, /*allow_exceptions=*/false);
    const Json job = {{"id", row.id},
                      {"name", row.name},
                      {"state", std::string(job_state_name(row.state))},
                      {"step", row.step},
                      {"epoch", row.epoch},
                      {"reason", row.reason},
                      {"replica", row.owner},
                      {"model", row.model_name.empty() ? "" : row.model_name + ":" + std::to_string(row.model_version)},
                      {"spec", spec.is_discarded() ? Json(row.spec_json) : spec}};
    // Text a row holds is UTF-8 by the time it is stored; rows an older version wrote may not
    // be: such bytes become U+FFFD instead of failing the whole page.
    std::string text = job.dump(-1, ' ', false, Json::error_handler_t::replace);
    text.pop_back();  // the closing brace: the kept members follow
    jobs.append(jobs.size() > 1 ? "," : "").append(text).append(",").append(s.text).append("}");
    kept.emplace(row.id, std::move(s));
  }
  series_ = std::move(kept);  // jobs no longer on the page are forgotten
  jobs.append("]");
  Json rest = {{"models", Models()}};
  if (serving_ != nullptr) rest["serving_window_seconds"] = serving_->window().count();
  const std::string tail = rest.dump(-1, ' ', false, Json::error_handler_t::replace);
  return std::string("{\"jobs\":").append(jobs).append(",").append(tail.substr(1));
}

std::string status_json(const Store& store, int64_t max_jobs, size_t max_points) {
  return StatusPage(store, max_jobs, max_points).json();
}

const std::string& status_html() {
  static const std::string page = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Anvil</title>
<style>
body{font:14px system-ui,sans-serif;margin:16px;color:#222;max-width:1400px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:0 0 6px}h3{font-size:14px;margin:0 0 6px}
small{color:#666;font-weight:normal}.scroll{overflow-x:auto;margin-bottom:20px}
table{border-collapse:collapse}td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:left;white-space:nowrap}
td.num,th.num{text-align:right}
.job{border:1px solid #ddd;border-radius:6px;padding:12px;margin-bottom:16px}
.reason{background:#fdecea;border-left:4px solid #d62728;padding:6px 10px;margin:6px 0;overflow-wrap:anywhere}
.jobbody{display:flex;flex-wrap:wrap;gap:12px}
.charts{flex:3 1 480px;display:grid;grid-template-columns:repeat(auto-fill,minmax(250px,1fr));gap:8px;min-width:0}
.findings{flex:1 1 260px;min-width:0}
figure{margin:0}figcaption{font-size:12px;color:#444}
svg{width:100%;height:auto;background:#fafafa;border:1px solid #e5e5e5}
polyline{fill:none;stroke-width:1.5}.train_loss{stroke:#1f77b4}.val_loss{stroke:#d62728}.s0{stroke:#2a7d2a}
.mark{stroke-dasharray:3 3}.mark.critical{stroke:#b00020}.mark.warning{stroke:#e08000}.mark.info{stroke:#888}
.finding{border-left:4px solid #888;padding:4px 8px;margin-bottom:8px;overflow-wrap:anywhere}
.finding.critical{border-color:#b00020}.finding.warning{border-color:#e08000}
.evidence{font:12px ui-monospace,monospace;color:#444}.advice{font-size:13px;margin-top:2px}
.none{color:#2a7d2a}pre{font-size:12px;overflow-x:auto;background:#f6f6f6;padding:8px}
</style></head><body>
<h1>Anvil</h1><p id="updated">loading...</p>
<h2>Jobs</h2>
<div class="scroll"><table id="jobs"><thead><tr><th>job</th><th>name</th><th>state</th><th class="num">step</th>
<th class="num">epoch</th><th>replica</th><th>model</th><th>findings</th></tr></thead><tbody></tbody></table></div>
<div id="charts"></div>
<h2>Served models</h2>
<div class="scroll"><table id="models"><thead><tr><th>model</th><th>versions (precision)</th><th class="num">requests/s</th>
<th class="num">p50 ms</th><th class="num">p99 ms</th><th class="num">batch rows (mean / max)</th>
<th class="num">errors (last min / total)</th></tr></thead><tbody></tbody></table></div>
<script>
// Job names, reasons, specs, findings' advice and model names are user text or echo it:
// escaped before they enter the markup.
function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'})[c]);
}
const W = 480, H = 200;
// The charts of a job, all on the job's step axis. `range`: a fixed y range (a share).
const CHARTS = [
  {id: 'loss', title: 'loss (blue: train, red: validation)', series: ['train_loss', 'val_loss'], log: true},
  {id: 'accuracy', title: 'validation accuracy', series: ['val_accuracy']},
  {id: 'grad_norm', title: 'gradient norm', series: ['grad_norm'], log: true},
  {id: 'lr', title: 'learning rate', series: ['lr']},
  {id: 'samples_per_second', title: 'samples/s', series: ['samples_per_second']},
  {id: 'data_wait', title: 'data-wait share of the step', series: ['data_wait_ratio'], range: [0, 1]},
  {id: 'loss_scale', title: 'AMP loss scale', series: ['loss_scale'], log: true},
];
function fmt(v) { return Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : +v.toPrecision(3); }
function chart(job, c, x0, x1) {
  const pts = [].concat(...c.series.map(k => job[k] || []));
  if (!pts.length) return '';
  let y0 = c.range ? c.range[0] : Math.min(...pts.map(p => p[1]));
  let y1 = c.range ? c.range[1] : Math.max(...pts.map(p => p[1]));
  // Values that span more than two decades are drawn on a log scale, or the interesting part of
  // the curve is a flat line at the bottom.
  const log = !!c.log && y0 > 0 && y1 / y0 > 100;
  const f = log ? Math.log10 : (y => y);
  const sx = x => 40 + (W - 50) * (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5);
  const sy = y => 10 + (H - 30) * (y1 > y0 ? 1 - (f(y) - f(y0)) / (f(y1) - f(y0)) : 0.5);
  let body = '';
  c.series.forEach((k, i) => {
    const p = job[k] || [];
    if (p.length) body += '<polyline class="' + k + ' s' + i + '" data-series="' + k + '" points="' +
      p.map(q => sx(q[0]).toFixed(2) + ',' + sy(q[1]).toFixed(2)).join(' ') + '"/>';
  });
  // Where each finding fired, on every chart: the symptom and its cause on one time axis.
  for (const fd of job.findings) {
    if (fd.last_step < x0 || fd.last_step > x1) continue;
    const x = sx(fd.last_step).toFixed(2);
    body += '<line class="mark ' + esc(fd.severity) + '" data-code="' + esc(fd.code) + '" x1="' + x + '" x2="' + x +
      '" y1="10" y2="' + (H - 20) + '"><title>' + esc(fd.code) + ' at step ' + fd.last_step + '</title></line>';
  }
  return '<figure class="chart"><figcaption>' + c.title + (log ? ' (log scale)' : '') + '</figcaption>' +
    '<svg viewBox="0 0 ' + W + ' ' + H + '" data-job="' + esc(job.id) + '" data-chart="' + c.id + '" data-points="' +
    pts.length + '" data-scale="' + (log ? 'log' : 'linear') + '">' + body +
    '<text x="4" y="14" font-size="10">' + fmt(y1) + '</text><text x="4" y="' + (H - 20) + '" font-size="10">' +
    fmt(y0) + '</text><text x="40" y="' + (H - 4) + '" font-size="10">step ' + x0 + ' .. ' + x1 + '</text></svg></figure>';
}
function findings(job) {
  const items = job.findings.map(fd =>
    '<div class="finding ' + esc(fd.severity) + '" data-code="' + esc(fd.code) + '"><b>' + esc(fd.code) + '</b> ' +
    esc(fd.severity) + ', steps ' + fd.first_step + '..' + fd.last_step + '<div class="evidence">' +
    Object.entries(fd.evidence).map(([k, v]) => esc(k) + ' = ' + fmt(v)).join(', ') + '</div><div class="advice">' +
    esc(fd.advice) + '</div></div>').join('');
  return '<aside class="findings" data-job="' + esc(job.id) + '"><h3>Findings</h3>' +
    (items || '<p class="none">none so far</p>') + '</aside>';
}
function card(job) {
  const steps = [].concat(...CHARTS.map(c => [].concat(...c.series.map(k => (job[k] || []).map(p => p[0])))));
  const x0 = steps.length ? Math.min(...steps) : 0, x1 = steps.length ? Math.max(...steps) : 0;
  const charts = steps.length ? CHARTS.map(c => chart(job, c, x0, x1)).join('') : '<p>no metrics yet</p>';
  return '<section class="job" data-job="' + esc(job.id) + '"><h2>' + esc(job.name) + ' <small>' + esc(job.id) + ' · ' +
    job.state + ' · step ' + job.step + ' · epoch ' + job.epoch + (job.replica ? ' · ' + esc(job.replica) : '') +
    '</small></h2>' + (job.reason ? '<p class="reason">' + esc(job.reason) + '</p>' : '') +
    '<div class="jobbody"><div class="charts">' + charts + '</div>' + findings(job) + '</div>' +
    '<details><summary>spec</summary><pre>' + esc(JSON.stringify(job.spec, null, 2)) + '</pre></details></section>';
}
function modelRow(m) {
  const versions = m.versions.map(v => 'v' + v.version + ' ' + (v.precision ? esc(v.precision) : '(not loaded)')).join(', ');
  return '<tr data-model="' + esc(m.name) + '"><td>' + esc(m.name) + '</td><td>' + versions + '</td><td class="num">' +
    m.requests_per_second.toFixed(2) + '</td><td class="num">' + m.p50_ms.toFixed(2) + '</td><td class="num">' +
    m.p99_ms.toFixed(2) + '</td><td class="num">' + m.batch_rows_mean.toFixed(1) + ' / ' + m.batch_rows_max +
    '</td><td class="num">' + m.errors + ' / ' + m.errors_total + '</td></tr>';
}
async function refresh() {
  try {
    const data = await (await fetch('/status.json')).json();
    document.querySelector('#jobs tbody').innerHTML = data.jobs.map(j =>
      '<tr><td>' + esc(j.id) + '</td><td>' + esc(j.name) + '</td><td title="' + esc(j.reason) + '">' + j.state +
      '</td><td class="num">' + j.step + '</td><td class="num">' + j.epoch + '</td><td>' + esc(j.replica) + '</td><td>' +
      esc(j.model) + '</td><td>' + j.findings.map(f => esc(f.code)).join(' ') + '</td></tr>').join('');
    document.getElementById('charts').innerHTML = data.jobs.map(card).join('');
    document.querySelector('#models tbody').innerHTML = data.models.length ? data.models.map(modelRow).join('') :
      '<tr><td colspan="7">no model registered yet</td></tr>';
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString() +
      ' (every 2 s; serving numbers over the last ' + (data.serving_window_seconds || 60) + ' s)';
  } catch (e) {
    document.getElementById('updated').textContent = 'cannot reach anvild: ' + e;
  }
}
refresh();
setInterval(refresh, 2000);
</script></body></html>
)html";
  return page;
}

}  // namespace anvil::server
