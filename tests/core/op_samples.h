// Sample inputs and functions for every differentiable row of the op table (broadcasting,
// non-contiguous inputs, repeated indices), shared by the gradcheck walk and the CPU-vs-CUDA
// parity walk. Inputs are float64 leaves on the CPU; index tensors built inside the
// functions land on sample_device(), so the same functions run on another device.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "core/autograd/gradcheck.h"
#include "core/ops/op_table.h"

namespace anvil::samples {

struct OpSample {
  std::string name;
  std::vector<Tensor> inputs;
  autograd::TensorFn fn;
  bool second_order = true;
};
using OpSamples = std::map<OpId, std::vector<OpSample>>;

// Seeds the generator and builds the samples (the same values at every call).
OpSamples MakeOpSamples();

// Where index tensors built inside sample functions are placed (default: the CPU).
void set_sample_device(Device device);
Device sample_device();

}  // namespace anvil::samples
