// Per-request resource bounds: what one call may make the server hold, checked before the
// work (or the allocation) it would cause. Every limit is named in the error it produces.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace anvil::server {

struct RequestLimits {
  // The largest message the Training service takes (a JobSpec with its model_json): gRPC's own
  // default. The Serving service's Predict takes larger ones (batches of images).
  int64_t training_message_bytes = 4 << 20;
  int64_t predict_message_bytes = 64 << 20;
  // A PredictRequest, checked on the wire before it is parsed: an empty Tensor is 2 bytes on
  // the wire and ~100 in memory, so counts, not bytes, bound what parsing costs.
  int max_predict_inputs = 16;
  int max_tensor_dims = 32;
  int64_t max_wire_fields = 1 << 16;  // fields of any kind in one request, nested ones included
  size_t max_name_bytes = 1024;       // a model name, version or tensor name
  // Predicts admitted at once (each holds its request and a worker thread); more wait in a
  // queue of max_predict_queue, beyond which they are refused with RESOURCE_EXHAUSTED.
  int max_concurrent_predicts = 64;  // twice a full batch (32): enough for the batcher to fill batches
  int max_predict_queue = 1024;
  // Every other unary call (job and model listings, submits, KServe metadata) runs on a pool of
  // its own with the same rule: this many at once, this many waiting, RESOURCE_EXHAUSTED beyond.
  int max_concurrent_calls = 16;
  int max_call_queue = 1024;
  // Streaming calls at once (StreamMetrics, Export, RegisterModel): each holds a thread while
  // it lasts, a metrics stream as long as its job runs. Beyond either bound a new stream is
  // refused with RESOURCE_EXHAUSTED (none wait: a stream may last for hours).
  int max_streams = 256;
  // CPU-heavy work (a dry run's plan, an ONNX export's capture and verification, an upload's
  // conversion, a quantization: server/heavy_work.h) runs on a pool of its own: this many at
  // once (each may use every core and hold a model's activations), this many waiting, and
  // RESOURCE_EXHAUSTED beyond. The calls waiting for it hold no call-pool thread.
  int max_concurrent_heavy_work = 2;
  int max_heavy_work_queue = 64;
  int max_metric_streams_per_job = 64;
  // Export and RegisterModel: a client that neither takes the next chunk nor sends one for this
  // long is cancelled (each holds a stream-pool thread).
  std::chrono::milliseconds stream_stall_timeout{60000};
};

}  // namespace anvil::server
