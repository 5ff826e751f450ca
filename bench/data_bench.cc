// Data pipeline benchmark: Anvil's DataLoader beside torch.utils.data.DataLoader (Debian's
// python3-torch, run through bench/data_peer.py), same workloads, same machine, one run.
//
//   anvil_bench_data              runs both tables below (each measurement in a fresh process)
//   anvil_bench_data rss N        one child measurement: resident memory with N workers
//   anvil_bench_data png DIR N T  one child measurement: images/s with N workers, T intra-op threads
//
// Table 1 (PITFALLS 3, memory): a 1 GiB in-memory dataset iterated with 0, 1, 2, 4, 8 workers;
// resident memory at mid-epoch. Anvil's workers are threads sharing the dataset; PyTorch's are
// processes, for which the table shows the summed RSS (what `top` and cgroup limits see, up to
// sharing) and the summed PSS (shared pages divided among the processes that map them).
// Table 2 (throughput): decode PNG -> to CHW float -> RandomCrop 224 -> flip -> Normalize,
// batches of 32, with 0, 1, 2 workers; images/s and the speed-up over 0 workers on one thread.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "core/data/dataloader.h"
#include "core/data/datasets/image_folder.h"
#include "core/data/philox_stream.h"
#include "core/data/transforms.h"

#ifndef ANVIL_BENCH_PEER_SCRIPT
#define ANVIL_BENCH_PEER_SCRIPT "bench/data_peer.py"
#endif

namespace {

using namespace anvil;
using namespace anvil::data;
using Clock = std::chrono::steady_clock;

constexpr int64_t kRows = 262144, kCols = 1024;  // 1 GiB of float32
constexpr int kImages = 640, kImageSide = 256, kCrop = 224, kBatch = 32;

double ProcStatusMiB(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::string(key).size())) / 1024.0;
  }
  return -1;
}

int RssChild(int workers) {
  Tensor x = rand({kRows, kCols});
  Tensor y = randint(0, 10, {kRows});
  auto ds = std::make_shared<TensorDataset>(x, y);
  DataLoader loader(ds, {.batch_size = 256, .shuffle = true, .num_workers = workers, .seed = 1});
  double mid_rss = 0;
  int64_t k = 0;
  const auto t0 = Clock::now();
  for (Example& b : loader) {
    if (++k == loader.size() / 2) mid_rss = ProcStatusMiB("VmRSS:");
    (void)b;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("{\"rss_mib\": %.1f, \"hwm_mib\": %.1f, \"seconds\": %.3f}\n", mid_rss, ProcStatusMiB("VmHWM:"), secs);
  return 0;
}

int PngChild(const std::string& dir, int workers, int threads) {
  set_num_threads(threads);
  auto images = std::make_shared<ImageFolder>(dir);
  auto pipeline = std::make_shared<Compose>(std::vector<std::shared_ptr<Transform>>{
      std::make_shared<ToTensor>(), std::make_shared<RandomCrop>(kCrop, kCrop, 0, 1),
      std::make_shared<RandomHorizontalFlip>(0.5, 2),
      std::make_shared<Normalize>(std::vector<double>{0.485, 0.456, 0.406}, std::vector<double>{0.229, 0.224, 0.225})});
  auto ds = std::make_shared<MapDataset>(images, pipeline);
  DataLoader loader(ds, {.batch_size = kBatch, .shuffle = true, .num_workers = workers, .seed = 3});
  for (Example& b : loader) (void)b;  // warm the page cache and the allocator
  int64_t n = 0;
  const auto t0 = Clock::now();
  for (int pass = 0; pass < 4; ++pass) {  // ~1 s per row: long enough to average out noise
    for (Example& b : loader) n += b["input"].size(0);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("{\"images_per_s\": %.1f, \"data_wait_ratio\": %.3f}\n", static_cast<double>(n) / secs,
              loader.stats().wait_ratio());
  return 0;
}

// Runs `cmd`, returns its stdout's last line.
std::string Run(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out, line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out = buf;
  pclose(p);
  return out;
}

// The number after "key": in a one-line JSON object, or -1.
double Field(const std::string& json, const std::string& key) {
  const auto pos = json.find("\"" + key + "\":");
  if (pos == std::string::npos) return -1;
  return std::atof(json.c_str() + pos + key.size() + 3);
}

void WriteImages(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(dir + "/.complete")) return;
  for (int i = 0; i < kImages; ++i) {
    const std::string cls = dir + "/class" + std::to_string(i % 4);
    fs::create_directories(cls);
    // Smooth gradients with texture noise: compresses and decodes like a photo, not like
    // pure noise (which PNG cannot compress) or a flat field (which it trivially does).
    std::vector<uint8_t> px(static_cast<size_t>(kImageSide * kImageSide * 3));
    PhiloxStream rng(static_cast<uint64_t>(i), 0);
    for (int yy = 0; yy < kImageSide; ++yy) {
      for (int xx = 0; xx < kImageSide; ++xx) {
        for (int c = 0; c < 3; ++c) {
          const int v = (xx * (c + 1) + yy * (3 - c) + i * 7) / 2 + static_cast<int>(rng.NextU32() % 24);
          px[static_cast<size_t>((yy * kImageSide + xx) * 3 + c)] = static_cast<uint8_t>(v % 256);
        }
      }
    }
    write_png(cls + "/img" + std::to_string(i) + ".png", tensor(px, IntArray{kImageSide, kImageSide, 3}));
  }
  std::ofstream(dir + "/.complete") << "ok\n";
}

int Orchestrate(const std::string& self) {
  const std::string peer = std::string("/usr/bin/python3 ") + ANVIL_BENCH_PEER_SCRIPT;
  const bool have_peer = std::system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0;
  std::printf("Data pipeline: Anvil DataLoader (threads) vs torch.utils.data.DataLoader (processes)\n");
  std::printf("peer: %s\n\n",
              have_peer ? Run("/usr/bin/python3 -c 'import torch; print(\"torch \" + torch.__version__)'").c_str()
                        : "n/a (install python3-torch python3-torchvision: make deps-bench)");
  std::printf("### Resident memory, 1 GiB in-memory dataset, batch 256, mid-epoch\n\n");
  std::printf(
      "| workers | anvil RSS MiB | anvil growth | torch RSS sum MiB | torch PSS sum MiB | torch PSS growth |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  double anvil0 = 0, torch0 = 0;
  for (int w : {0, 1, 2, 4, 8}) {
    const std::string a = Run(self + " rss " + std::to_string(w));
    const double rss = Field(a, "rss_mib");
    if (w == 0) anvil0 = rss;
    std::string t = have_peer ? Run(peer + " rss " + std::to_string(w) + " 2>/dev/null") : "";
    const double trss = Field(t, "rss_sum_mib"), tpss = Field(t, "pss_sum_mib");
    if (w == 0) torch0 = tpss;
    std::printf("| %d | %.0f | %+.1f %% | %s | %s | %s |\n", w, rss, 100.0 * (rss / anvil0 - 1.0),
                trss > 0 ? std::to_string(static_cast<int>(trss)).c_str() : "n/a",
                tpss > 0 ? std::to_string(static_cast<int>(tpss)).c_str() : "n/a",
                tpss > 0 ? (std::to_string(static_cast<int>(100.0 * (tpss / torch0 - 1.0))) + " %").c_str() : "n/a");
    std::fflush(stdout);
  }
  const std::string dir = (std::filesystem::temp_directory_path() / "anvil_bench_png").string();
  WriteImages(dir);
  std::printf(
      "\n### Throughput: PNG %dx%d decode -> CHW float -> RandomCrop %d -> flip -> Normalize, "
      "batch %d, %d images\n\n",
      kImageSide, kImageSide, kCrop, kBatch, kImages);
  std::printf(
      "Speed-up is over 0 workers with 1 intra-op thread: the cost of the pipeline on one core. With\n"
      "0 workers and 2 threads the element-wise steps already use both cores (intra-op), and the\n"
      "loop has no training step to overlap with, so that row is a bound, not the usual case.\n\n");
  std::printf(
      "| workers | intra-op threads | anvil img/s | anvil speed-up | torch img/s | torch speed-up | anvil/torch |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  double a0 = 0, t0 = 0;
  for (auto [w, threads] : {std::pair{0, 1}, {0, 2}, {1, 2}, {2, 2}}) {
    const std::string args = " png " + dir + " " + std::to_string(w) + " " + std::to_string(threads);
    const double ips = Field(Run(self + args), "images_per_s");
    const double tips = have_peer ? Field(Run(peer + args + " 2>/dev/null"), "images_per_s") : -1;
    if (a0 == 0) {
      a0 = ips;
      t0 = tips;
    }
    char tcol[64] = "n/a", tsp[64] = "n/a", ratio[64] = "n/a";
    if (tips > 0) {
      std::snprintf(tcol, sizeof tcol, "%.0f", tips);
      std::snprintf(tsp, sizeof tsp, "%.2fx", tips / t0);
      std::snprintf(ratio, sizeof ratio, "%.2f", ips / tips);
    }
    std::printf("| %d | %d | %.0f | %.2fx | %s | %s | %s |\n", w, threads, ips, ips / a0, tcol, tsp, ratio);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "rss" && argc == 3) return RssChild(std::atoi(argv[2]));
  if (mode == "png" && argc == 5) return PngChild(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  // bench/run.sh passes its generic arguments (threads, filter) to every program: ignored here.
  return Orchestrate(std::filesystem::canonical("/proc/self/exe").string());
}
