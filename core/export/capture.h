// Graph capture for export: runs a model's forward once with a Capture active on the calling
// thread and records what it computes as a Trace, the op rows it dispatched (and the views it
// made) with the values that flow between them.
//
// What the trace is made of:
//   - inputs: the tensors passed to capture(), named;
//   - constants: every tensor an op reads that no recorded op made (parameters, buffers, and
//     tensors the forward created from nothing, e.g. zeros). A constant that a module owns
//     carries its dotted name;
//   - nodes: one per top-level op row (ops that kernels run internally are not recorded), or
//     one per composite: a function that knows its own export form (layer_norm,
//     max_pool2d, embedding) opens a Composite, and the ops it runs inside are not recorded;
//     the composite is recorded as one node of its ONNX operator. The int8 layers
//     (core/quant/quantized_layers.h), whose kernels run outside the op table, record
//     composites that lowering expands into several nodes (their QDQ form).
// Ops whose inputs are all constants are not recorded: their results are constants too
// (folded at capture: a transposed weight, a batch norm's rsqrt(var + eps)).
//
// What a trace refuses, with a CaptureError naming the op: reading the value of a tensor
// that depends on the inputs (item(), a bool conversion, nonzero, and the ops whose output
// shape depends on their input's values), in-place writes into a tensor that shares storage
// with another captured one, and ops with no export form (gradients, optimizer steps).
//
// Thread-safety: a Capture records only the thread that made it; one at a time per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/ops/attrs.h"
#include "core/ops/op_table.h"
#include "core/tensor/tensor.h"
#include "core/util/error.h"

namespace anvil::exporter {

// The model does something an exported graph cannot express; what() names it and the fix.
class CaptureError : public Error {
 public:
  explicit CaptureError(const std::string& msg) : Error(msg) {}
};

// An attribute of a composite node, as ONNX's AttributeProto kinds.
using AttrValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>, std::vector<std::string>>;
using Attributes = std::vector<std::pair<std::string, AttrValue>>;

struct Value {
  enum Kind : int8_t { kInput, kConstant, kComputed };
  Kind kind = kComputed;
  IntArray sizes;
  ScalarType dtype = kFloat32;
  Tensor tensor;      // the value itself (constants are written from it; all are kept alive)
  std::string name;   // inputs: their name; constants owned by a module: the dotted name
  std::string maker;  // constants: the op that first read them (messages)
  // Whether the value depends on the inputs (a view of a constant is recorded, so that its
  // window can follow a symbolic size, but reading it is no data-dependent read).
  bool from_inputs = false;
};

struct Node {
  OpId op = OpId::Clone;  // the row (unused for a composite)
  std::string composite;  // the ONNX operator of a composite, "" for a row
  OpAttrs attrs;          // a row's arguments
  Attributes composite_attrs;
  std::vector<int> inputs;   // value ids; -1 for an absent optional input
  std::vector<int> outputs;  // value ids
  // What the node is, for messages: the row's name or the composite's function.
  std::string label() const;
};

struct Trace {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs, outputs;  // value ids
};

// Names for the constants a module owns (its named_parameters and named_buffers).
using ConstantNames = std::vector<std::pair<std::string, Tensor>>;

// Runs `forward` on `inputs` (named `input_names`) with a capture active and returns the
// trace. The forward runs under NoGradGuard. Throws CaptureError as above.
using Forward = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
Trace capture(const Forward& forward, const std::vector<Tensor>& inputs, const std::vector<std::string>& input_names,
              const ConstantNames& constant_names);

// A function with an export form of its own: opened before its ops run, finished with its
// output. While open, the ops inside are not recorded (and may read values: a composite's
// checks are not part of the graph). Without an active capture it does nothing and costs a
// thread-local load.
class Composite {
 public:
  // `inputs`: the node's inputs in the ONNX operator's order (undefined = absent optional).
  Composite(const char* onnx_op, std::vector<Tensor> inputs, Attributes attrs = {});
  ~Composite();
  Composite(const Composite&) = delete;
  Composite& operator=(const Composite&) = delete;
  // Records the node with `output` and returns it.
  const Tensor& finish(const Tensor& output);
  // Records the node with several outputs (in the ONNX operator's order: MaxPool's Y and
  // Indices).
  void finish(const std::vector<Tensor>& outputs);

 private:
  struct State;
  std::unique_ptr<State> state_;  // null when no capture is active
};

// Whether a capture is recording on this thread (and not inside a kernel or composite).
bool capturing();

namespace detail {
class Capture;
extern thread_local Capture* t_capture;
// The hooks the dispatcher calls (each a no-op unless a capture is active on this thread).
void on_op(OpId op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, const OpAttrs& attrs);
void on_inplace(OpId op, const std::vector<Tensor>& inputs, const Tensor& out, const OpAttrs& attrs);
// A read of `t`'s values on the host (`what`: "item()", ...): refused when t depends on the inputs.
void on_value_read(const Tensor& t, const char* what);
// Kernels may run tensor ops internally: those are not part of the graph.
class KernelScope {
 public:
  KernelScope();
  ~KernelScope();
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  Capture* capture_;
};
inline bool active() { return t_capture != nullptr; }
}  // namespace detail

}  // namespace anvil::exporter
