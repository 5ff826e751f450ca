// Declarative models: a JSON spec lists layers; the builder infers every layer's input size
// from the one before (no in_features / in_channels to keep in sync by hand) and reports a
// mistake by the layer's index and type, with the shape it expected and the one it got.
//
//   {"input_shape": [1, 8, 8],
//    "layers": [{"type": "conv2d", "out_channels": 32, "kernel_size": 3, "padding": "same"},
//               {"type": "batchnorm2d"}, {"type": "relu"}, {"type": "maxpool2d", "kernel_size": 2},
//               {"type": "flatten"}, {"type": "linear", "out_features": 10}]}
//
// Layer types: linear, conv1d, conv2d, maxpool2d, avgpool2d, adaptiveavgpool2d, batchnorm1d,
// batchnorm2d, layernorm, groupnorm, dropout, relu, gelu, tanh, sigmoid, silu, hardswish, leakyrelu,
// relu6, hardsigmoid, mish, selu, softsign, logsigmoid, hardtanh (min_val, max_val), celu (alpha),
// hardshrink, softshrink (lambd), threshold (threshold, value; required), glu, softmin (dim, counting
// the batch dim, default -1), prelu (num_parameters: 1 or the channel count, init),
// flatten, unflatten ({"shape": [1, 8, 8]}: a flat row into a sample shape), embedding,
// residual (its "layers" run on x and are added to x; a 1x1 convolution or
// linear projection matches the shapes when they differ), gru, lstm (sequence [T, F] -> the
// last hidden state [H]; "bidirectional": true -> both directions' final states [2H], or the
// sequence [T, 2H]), transformer_encoder, mean_pool (over a sequence dim).
// Options follow PyTorch's names: maxpool2d kernel_size, stride, padding, dilation, ceil_mode;
// avgpool2d kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override;
// batchnorm eps, momentum (null: a cumulative average); embedding num_embeddings,
// embedding_dim, padding_idx, max_norm, norm_type.
// Shapes exclude the batch dim. Unknown keys are errors (a typo is never ignored).
#pragma once

#include <memory>
#include <string>

#include "core/nn/module.h"
#include "core/tensor/tensor.h"

namespace anvil::models {

struct BuiltModel {
  std::shared_ptr<nn::Module> module;
  IntArray input_shape;               // without the batch dim
  IntArray output_shape;              // without the batch dim
  std::string spec;                   // the normalised JSON spec (inferred sizes filled in)
  ScalarType input_dtype = kFloat32;  // int64 when the first layer is an embedding
  // The model's signature names: what Predict and KServe's ModelInfer take and answer, and
  // what its ONNX export calls the graph's input and output. An imported ONNX model keeps its
  // graph's names, so a client moving between Anvil and onnxruntime renames nothing.
  std::string input_name = "input";
  std::string output_name = "output";
};

// Bounds on a spec, so that checking one costs little whatever a client sends: the text's
// size and the number of layers (nested ones included). Checking is linear in both.
inline constexpr size_t kMaxModelSpecBytes = 1 << 20;
inline constexpr int64_t kMaxModelLayers = 10000;
inline constexpr int kMaxModelNesting = 32;  // residuals inside residuals (each level recurses)
// The largest size a spec may name or a layer may produce (a dimension, a kernel, a stride, a
// count). No real model comes near it, and below it every shape formula fits in int64.
inline constexpr int64_t kMaxModelDim = int64_t{1} << 31;

// What a model costs, in elements (float32: 4 bytes each), from its spec alone.
struct ModelCost {
  int64_t layers = 0;
  int64_t parameters = 0;
  int64_t buffers = 0;                 // running statistics (batch norm)
  int64_t activations_per_sample = 0;  // kept for the backward pass of one sample (an upper bound)
  int depth = 0;                       // residual nesting while walking
};

// Checks the spec as build_model does (every layer, key and shape) and counts its cost, without
// building or allocating anything: a spec with 10^12 parameters is priced, not attempted.
// Counts saturate instead of overflowing.
ModelCost estimate_model(const std::string& json_spec);

// Builds from a JSON spec text; throws anvil::Error naming the layer on any mistake.
BuiltModel build_model(const std::string& json_spec);

// Named presets: a JSON spec for `input_shape` and `num_classes`.
//   mlp          Linear-ReLU x2 (128 wide), any input (flattened)
//   lenet5       LeNet-5 style CNN for [C, H, W] images
//   resnet       a small ResNet (3 residual stages) for [C, H, W] images
//   gru          embedding -> GRU -> linear, for int64 token sequences [T] (vocab = input
//                values below `vocab_size`)
//   transformer  embedding + learned positions -> 2 encoder layers -> mean pool -> linear
std::string preset_spec(const std::string& name, const IntArray& input_shape, int64_t num_classes,
                        int64_t vocab_size = 0);
// The preset names, for help texts and errors.
std::string preset_names();

}  // namespace anvil::models
