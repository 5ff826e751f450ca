// GPU metrics through NVML loaded at run time: a fake driver library gives known values;
// without the library (or when it fails) the GPU families are absent, never zero.
#include "server/metrics/gpu_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>

#include "tests/paths.h"

namespace anvil::server::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

double GaugeValue(const std::string& text, const std::string& series) {
  std::smatch m;
  const std::regex re("\\n" + std::regex_replace(series, std::regex(R"([{}"])"), R"(\$&)") + " ([^\\n]+)\\n");
  if (!std::regex_search(text, m, re)) return -1;
  return std::stod(m[1]);
}

TEST(GpuMetrics, AbsentLibraryRegistersNoGpuFamilies) {
  Registry r;
  std::string why;
  EXPECT_EQ(GpuMetrics::Open(r, "/nonexistent/libnvidia-ml.so.1", &why), nullptr);
  EXPECT_THAT(why, HasSubstr("cannot load /nonexistent/libnvidia-ml.so.1"));
  EXPECT_THAT(r.render(), Not(HasSubstr("anvil_gpu")));
}

TEST(GpuMetrics, LibraryWithoutNvmlSymbolsIsRejected) {
  Registry r;
  std::string why;
  EXPECT_EQ(GpuMetrics::Open(r, "libm.so.6", &why), nullptr);
  EXPECT_THAT(why, HasSubstr("lacks nvmlInit_v2"));
  EXPECT_THAT(r.render(), Not(HasSubstr("anvil_gpu")));
}

TEST(GpuMetrics, FailingInitRegistersNoGpuFamilies) {
  ::setenv("ANVIL_FAKE_NVML_INIT_RC", "999", 1);
  Registry r;
  std::string why;
  EXPECT_EQ(GpuMetrics::Open(r, anvil::test::FakeNvmlPath(), &why), nullptr);
  ::unsetenv("ANVIL_FAKE_NVML_INIT_RC");
  EXPECT_THAT(why, HasSubstr("nvmlInit failed with code 999"));
  EXPECT_THAT(r.render(), Not(HasSubstr("anvil_gpu")));
}

TEST(GpuMetrics, ReportsEachGpuFromTheDriverAtEveryScrape) {
  Registry r;
  std::string why;
  std::unique_ptr<GpuMetrics> gpu = GpuMetrics::Open(r, anvil::test::FakeNvmlPath(), &why);
  ASSERT_NE(gpu, nullptr) << why;
  EXPECT_EQ(gpu->device_count(), 2);
  const std::string first = r.render();
  EXPECT_THAT(first, HasSubstr("# TYPE anvil_gpu_utilization_ratio gauge\n"));
  EXPECT_DOUBLE_EQ(GaugeValue(first, R"(anvil_gpu_utilization_ratio{gpu="0"})"), 0.25);
  EXPECT_DOUBLE_EQ(GaugeValue(first, R"(anvil_gpu_utilization_ratio{gpu="1"})"), 0.75);
  EXPECT_DOUBLE_EQ(GaugeValue(first, R"(anvil_gpu_memory_total_bytes{gpu="1"})"), 80.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(GaugeValue(first, R"(anvil_gpu_info{gpu="1",name="Fake GPU 1"})"), 1.0);
  const double used0 = GaugeValue(first, R"(anvil_gpu_memory_used_bytes{gpu="0"})");
  EXPECT_GE(used0, 1.0 * (1ull << 30));
  EXPECT_LT(used0, 1.0 * (1ull << 30) + 1e6);
  // The fake's memory use grows with each read: a second scrape must read the driver again.
  gpu.reset();  // and the collector outlives the object that registered it
  const std::string second = r.render();
  EXPECT_GT(GaugeValue(second, R"(anvil_gpu_memory_used_bytes{gpu="0"})"), used0);
}

// The per-job reader (the doctor's LOW_DEVICE_UTILISATION): a GPU found by its PCI bus id
// (NVML orders by bus, CUDA may not), in either case of hex; nothing, rather than another
// GPU's value, for an empty or unknown id. It keeps the library loaded after the metrics
// object and its registry are gone.
TEST(GpuMetrics, TheUtilisationReaderFindsAGpuByItsBusId) {
  GpuMetrics::UtilisationReader read;
  {
    Registry r;
    std::string why;
    std::unique_ptr<GpuMetrics> gpu = GpuMetrics::Open(r, anvil::test::FakeNvmlPath(), &why);
    ASSERT_NE(gpu, nullptr) << why;
    read = gpu->utilisation_reader();
  }
  EXPECT_EQ(read("0000:3B:00.0"), 0.75);
  EXPECT_EQ(read("0000:3b:00.0"), 0.75);
  EXPECT_EQ(read("0000:18:00.0"), 0.25);
  EXPECT_EQ(read("0000:99:00.0"), std::nullopt);
  EXPECT_EQ(read(""), std::nullopt);
}

}  // namespace
}  // namespace anvil::server::metrics
