#include "server/metrics/serving_stats.h"

#include <algorithm>
#include <cmath>

namespace anvil::server::metrics {
namespace {

// Drops what fell out of the window, then the oldest beyond `max`.
template <typename T>
void Trim(std::deque<T>& q, ServingStats::Clock::time_point cutoff, size_t max) {
  while (!q.empty() && (q.front().at < cutoff || q.size() > max)) q.pop_front();
}

// The nearest-rank percentile: the ceil(p * n)-th smallest (p in (0, 1]).
double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  const size_t k = std::clamp<size_t>(rank, 1, v.size()) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

ServingStats::ServingStats(std::chrono::seconds window, size_t max_models, size_t max_samples)
    : window_(window), max_models_(max_models), max_samples_(std::max<size_t>(max_samples, 1)) {}

ServingStats::Model* ServingStats::Find(const std::string& model) {
  auto it = models_.find(model);
  if (it != models_.end()) return &it->second;
  if (models_.size() >= max_models_) return nullptr;
  return &models_[model];
}

void ServingStats::on_request(const std::string& model, double seconds, bool ok, Clock::time_point now) {
  MutexLock lock(&mu_);
  Model* m = Find(model);
  if (m == nullptr) return;
  if (m->requests_total == 0) m->first_request = now;
  ++m->requests_total;
  if (!ok) ++m->errors_total;
  m->requests.push_back({now, seconds, ok});
  Trim(m->requests, now - window_, max_samples_);
}

void ServingStats::on_batch(const std::string& model, int64_t rows, Clock::time_point now) {
  MutexLock lock(&mu_);
  Model* m = Find(model);
  if (m == nullptr) return;
  m->batches.push_back({now, rows});
  Trim(m->batches, now - window_, max_samples_);
}

void ServingStats::on_loaded(const std::string& model, int64_t version, const std::string& precision) {
  MutexLock lock(&mu_);
  Model* m = Find(model);
  if (m == nullptr) return;
  m->precision[version] = precision;
  // Bounded like the samples: the newest versions stay.
  while (m->precision.size() > max_samples_) m->precision.erase(m->precision.begin());
}

ServingStats::Summary ServingStats::summary(const std::string& model, Clock::time_point now) const {
  MutexLock lock(&mu_);
  Summary out;
  auto it = models_.find(model);
  if (it == models_.end()) return out;
  const Model& m = it->second;
  out.requests_total = m.requests_total;
  out.errors_total = m.errors_total;
  out.precision = m.precision;
  const Clock::time_point cutoff = now - window_;
  std::vector<double> latencies;
  latencies.reserve(m.requests.size());
  for (const Request& r : m.requests) {
    if (r.at < cutoff) continue;
    ++out.requests;
    if (!r.ok) ++out.errors;
    latencies.push_back(r.seconds);
  }
  // A server up for 5 s that served 50 requests serves 10 per second, not 50/60.
  const double span = std::chrono::duration<double>(now - std::max(cutoff, m.first_request)).count();
  if (out.requests > 0) out.requests_per_second = static_cast<double>(out.requests) / std::max(span, 1.0);
  out.p50_seconds = Percentile(latencies, 0.50);
  out.p99_seconds = Percentile(latencies, 0.99);
  int64_t rows = 0;
  for (const Batch& b : m.batches) {
    if (b.at < cutoff) continue;
    ++out.batches;
    rows += b.rows;
    out.batch_rows_max = std::max(out.batch_rows_max, b.rows);
  }
  if (out.batches > 0) out.batch_rows_mean = static_cast<double>(rows) / static_cast<double>(out.batches);
  return out;
}

}  // namespace anvil::server::metrics
