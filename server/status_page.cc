#include "server/status_page.h"

#include <nlohmann/json.hpp>

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

void StatusPage::Update(const std::string& job_id, Series& s) {
  constexpr int64_t kPage = 4096;
  while (true) {
    const std::vector<MetricRow> rows = store_.metrics(job_id, 0, s.after_seq, kPage);
    for (const MetricRow& m : rows) {
      s.after_seq = m.seq;
      if (m.kind != "step" && m.kind != "epoch") continue;
      Json e = Json::parse(m.payload_json, nullptr, /*allow_exceptions=*/false);
      if (!e.is_object()) continue;
      if (e.contains("step_metrics")) {
        // A job resumed from a checkpoint replays steps it had run: start the series again.
        if (m.step <= s.train.last_step()) {
          s = Series(max_points_);
          return Update(job_id, s);
        }
        s.train.add(m.step, Number(e["step_metrics"], "loss"));
      }
      if (e.contains("epoch_metrics") && e["epoch_metrics"].value("has_val_loss", false)) {
        s.val.add(m.step, Number(e["epoch_metrics"], "val_loss"));
      }
    }
    if (static_cast<int64_t>(rows.size()) < kPage) return;
  }
}

std::string StatusPage::json() {
  MutexLock lock(&mu_);
  Json jobs = Json::array();
  std::map<std::string, Series> kept;
  for (const JobRow& row : store_.list_jobs({}, max_jobs_)) {
    auto it = series_.find(row.id);
    Series s = it != series_.end() ? std::move(it->second) : Series(max_points_);
    Update(row.id, s);
    jobs.push_back({{"id", row.id},
                    {"name", row.name},
                    {"state", std::string(job_state_name(row.state))},
                    {"step", row.step},
                    {"epoch", row.epoch},
                    {"reason", row.reason},
                    {"replica", row.owner},
                    {"model", row.model_name.empty() ? "" : row.model_name + ":" + std::to_string(row.model_version)},
                    {"train_loss", ToJson(s.train.points())},
                    {"val_loss", ToJson(s.val.points())}});
    kept.emplace(row.id, std::move(s));
  }
  series_ = std::move(kept);  // jobs no longer on the page are forgotten
  // Text a row holds is UTF-8 by the time it is stored; rows an older version wrote may not be:
  // such bytes become U+FFFD instead of failing the whole page.
  return Json{{"jobs", jobs}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string status_json(const Store& store, int64_t max_jobs, size_t max_points) {
  return StatusPage(store, max_jobs, max_points).json();
}

const std::string& status_html() {
  static const std::string page = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Anvil</title>
<style>
body{font:14px system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin-bottom:24px}td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:left}
.job{display:inline-block;margin:0 16px 16px 0;vertical-align:top}
svg{background:#fafafa;border:1px solid #ddd}.train{stroke:#1f77b4;fill:none}.val{stroke:#d62728;fill:none}
</style></head><body>
<h1>Anvil</h1><p id="updated">loading...</p>
<table id="jobs"><thead><tr><th>job</th><th>name</th><th>state</th><th>step</th><th>epoch</th><th>replica</th><th>model</th></tr></thead><tbody></tbody></table>
<div id="charts"></div>
<script>
// Job names and failure reasons are user text: escaped before they enter the markup.
function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'})[c]);
}
// Losses that span more than two decades are drawn on a log scale, or the interesting part
// of the curve is a flat line at the bottom.
function line(points, x0, x1, y0, y1, w, h, cls, log) {
  if (!points.length) return '';
  const f = log ? Math.log10 : (y => y);
  const sx = x => 40 + (w - 50) * (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5);
  const sy = y => 10 + (h - 30) * (y1 > y0 ? 1 - (f(y) - f(y0)) / (f(y1) - f(y0)) : 0.5);
  return '<polyline class="' + cls + '" points="' + points.map(p => sx(p[0]).toFixed(1) + ',' + sy(p[1]).toFixed(1)).join(' ') + '"/>';
}
function chart(job) {
  const w = 480, h = 240, all = job.train_loss.concat(job.val_loss);
  if (!all.length) return '';
  const xs = all.map(p => p[0]), ys = all.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const log = y0 > 0 && y1 / y0 > 100;
  return '<div class="job"><b>' + esc(job.name) + '</b> ' + esc(job.id) + ' (' + job.state + ')<br>' +
    '<svg width="' + w + '" height="' + h + '" data-job="' + esc(job.id) + '" data-points="' + job.train_loss.length +
    '" data-scale="' + (log ? 'log' : 'linear') + '">' +
    line(job.train_loss, x0, x1, y0, y1, w, h, 'train', log) + line(job.val_loss, x0, x1, y0, y1, w, h, 'val', log) +
    '<text x="4" y="14" font-size="10">' + y1.toPrecision(3) + '</text><text x="4" y="' + (h - 20) + '" font-size="10">' +
    y0.toPrecision(3) + '</text><text x="40" y="' + (h - 4) + '" font-size="10">step ' + x0 + ' .. ' + x1 +
    ' (blue: train loss, red: validation loss' + (log ? ', log scale' : '') + ')</text></svg></div>';
}
async function refresh() {
  try {
    const data = await (await fetch('/status.json')).json();
    document.querySelector('#jobs tbody').innerHTML = data.jobs.map(j =>
      '<tr><td>' + esc(j.id) + '</td><td>' + esc(j.name) + '</td><td title="' + esc(j.reason) + '">' + j.state +
      '</td><td>' + j.step + '</td><td>' + j.epoch + '</td><td>' + esc(j.replica) + '</td><td>' + esc(j.model) +
      '</td></tr>').join('');
    document.getElementById('charts').innerHTML = data.jobs.map(chart).join('');
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
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
