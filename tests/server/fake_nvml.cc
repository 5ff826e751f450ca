// A stand-in for the driver's libnvidia-ml.so.1 with the C ABI GpuMetrics loads: two GPUs
// with known utilisation, memory and PCI bus ids, memory use that grows by 4 KiB per read (so
// a test can see each scrape read afresh), and ANVIL_FAKE_NVML_INIT_RC to make nvmlInit_v2 fail.
#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
struct FakeDevice {
  unsigned int index;
};
FakeDevice devices[2] = {{0}, {1}};
unsigned long long memory_reads = 0;
constexpr unsigned long long kGiB = 1ull << 30;
}  // namespace

extern "C" {
struct FakeUtilization {
  unsigned int gpu, memory;
};
struct FakeMemory {
  unsigned long long total, free, used;
};

int nvmlInit_v2() {
  const char* rc = std::getenv("ANVIL_FAKE_NVML_INIT_RC");
  return rc != nullptr ? std::atoi(rc) : 0;
}
int nvmlShutdown() { return 0; }
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index >= 2) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = &devices[index];
  return 0;
}
// GPU 1 sits on bus 0000:3B:00.0 and GPU 0 on 0000:18:00.0 (NVML parses the hex either case).
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (strcasecmp(bus_id, "0000:18:00.0") == 0) {
    *device = &devices[0];
    return 0;
  }
  if (strcasecmp(bus_id, "0000:3b:00.0") == 0) {
    *device = &devices[1];
    return 0;
  }
  return 6;  // NVML_ERROR_NOT_FOUND
}
int nvmlDeviceGetUtilizationRates(void* device, FakeUtilization* u) {
  const unsigned int i = static_cast<FakeDevice*>(device)->index;
  u->gpu = 25 + 50 * i;  // 25 % and 75 %
  u->memory = 10;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, FakeMemory* m) {
  const unsigned int i = static_cast<FakeDevice*>(device)->index;
  m->total = 80 * kGiB;
  m->used = (i + 1) * kGiB + 4096 * memory_reads++;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  std::snprintf(name, length, "Fake GPU %u", static_cast<FakeDevice*>(device)->index);
  return 0;
}
}
