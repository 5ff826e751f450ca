// /status.json's cost against the history it shows. The endpoint has no authentication, so a
// request must not cost more as jobs accumulate events. Measured: a page built from the whole
// history (what each request cost before the page kept its series: server/status_page.h), and
// the kept page at steady state, with and without new events between requests.
//
//   anvil_bench_status [events ...]   (default: 2000 21000 210000, over 20 jobs)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/backend/cpu/kernel_info.h"
#include "server/status_page.h"
#include "server/store_sqlite.h"

namespace {

using Clock = std::chrono::steady_clock;

double MedianMs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double TimeMs(F&& f, int reps) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return MedianMs(ms);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace anvil::server;
  std::vector<int64_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) sizes = {2000, 21000, 210000};
  const anvil::CpuKernelInfo cpu = anvil::cpu_kernel_info();
  std::printf("CPU: %s, ISA %s; store: SQLite in a temporary folder; 20 jobs\n\n", cpu.model.c_str(), cpu.isa.c_str());
  std::printf(
      "| stored events | whole history per request (ms) | kept page, no new events (ms) | kept page, +200 events (ms) "
      "|\n");
  std::printf("|---:|---:|---:|---:|\n");
  for (int64_t events : sizes) {
    const std::string dir = std::filesystem::temp_directory_path() / ("anvil-status-bench-" + std::to_string(events));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    {
      SqliteStore store(dir + "/anvil.db");
      std::vector<std::string> ids;
      for (int j = 0; j < 20; ++j) {
        JobRow r;
        r.name = "job" + std::to_string(j);
        r.spec_json = "{}";
        r.state = JobState::kRunning;
        r.device = "cpu";
        ids.push_back(store.insert_job(r).first.id);
      }
      std::vector<int64_t> step(20, 0);
      auto append = [&](int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const size_t j = static_cast<size_t>(i % 20);
          ++step[j];
          store.append_metric({ids[j], 0, step[j], "step",
                               R"({"step_metrics":{"loss":)" + std::to_string(1.0 / static_cast<double>(step[j])) +
                                   R"(,"lr":0.001,"grad_norm":1.5}})",
                               0});
        }
      };
      append(events);
      const double whole = TimeMs([&] { (void)status_json(store); }, 5);
      StatusPage page(store);
      (void)page.json();  // the first request after a start reads the history once
      const double kept = TimeMs([&] { (void)page.json(); }, 9);
      std::vector<double> with_new;
      for (int i = 0; i < 9; ++i) {
        append(200);  // not timed: the trainer's writes
        with_new.push_back(TimeMs([&] { (void)page.json(); }, 1));
      }
      const double fresh = MedianMs(with_new);
      std::printf("| %lld | %.1f | %.2f | %.2f |\n", static_cast<long long>(events), whole, kept, fresh);
    }
    std::filesystem::remove_all(dir);
  }
  return 0;
}
