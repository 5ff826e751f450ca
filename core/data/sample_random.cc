// Per-sample random streams and worker info: see sample_random.h.
#include "core/data/sample_random.h"

#include "core/data/philox_stream.h"
#include "core/util/error.h"

namespace anvil::data {
namespace {

thread_local const WorkerInfo* t_worker = nullptr;
thread_local bool t_active = false;
thread_local uint64_t t_key = 0;
thread_local uint64_t t_counter = 0;  // draws taken so far in the current sample

}  // namespace

const WorkerInfo* worker_info() { return t_worker; }

WorkerInfoScope::WorkerInfoScope(const WorkerInfo& info) : previous_(t_worker), info_(info) { t_worker = &info_; }
WorkerInfoScope::~WorkerInfoScope() { t_worker = previous_; }

SampleRandomScope::SampleRandomScope(uint64_t key)
    : previous_active_(t_active), previous_key_(t_key), previous_counter_(t_counter) {
  t_active = true;
  t_key = key;
  t_counter = 0;
}

SampleRandomScope::~SampleRandomScope() {
  t_active = previous_active_;
  t_key = previous_key_;
  t_counter = previous_counter_;
}

bool sample_random_active() { return t_active; }

std::array<uint32_t, 4> sample_random_draw(uint64_t stream_seed) {
  ANVIL_INTERNAL_ASSERT(t_active, "sample_random_draw outside a SampleRandomScope");
  // The counter is shared by all transforms of the sample: the pipeline runs them in a fixed
  // order, so each draw still has a fixed (key, counter) pair.
  return philox4x32(MixKey(t_key, stream_seed), t_counter++);
}

uint64_t sample_key(uint64_t seed, int64_t epoch, int64_t batch, int64_t position) {
  uint64_t k = MixKey(seed, static_cast<uint64_t>(epoch));
  k = MixKey(k, static_cast<uint64_t>(batch));
  return MixKey(k, static_cast<uint64_t>(position));
}

}  // namespace anvil::data
