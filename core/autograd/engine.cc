// The backward engine: counts dependencies over the reachable graph, then runs nodes in an
// order where each node runs after every node that feeds it (ready queue ordered by
// sequence number, newest first, like PyTorch), summing gradients per input slot.
#include "core/autograd/engine.h"

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <queue>

#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::autograd {
namespace {

struct NodeCmp {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

void Accumulate(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  slot = slot.defined() ? slot + g : g;
}

void CheckFinite(Node& node, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() || !grads[i].is_floating_point()) continue;
    NoGradGuard no_grad;
    if (!all(isfinite(grads[i])).item<bool>()) {
      throw Error(detail::StrCat("Function '", node.name(), "' returned nan or inf values in its ", i,
                                 "th output. The forward op was ",
                                 node.forward_context.empty() ? std::string("(unknown)") : node.forward_context,
                                 ". (Anomaly detection is on.)"));
    }
  }
}

struct Capture {
  absl::flat_hash_map<const Node*, std::vector<std::pair<uint32_t, size_t>>> at;  // node -> (input_nr, result index)
  std::vector<Tensor> results;
};

// The callbacks queued during the backward pass running on this thread (null outside one).
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

void RunGraph(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads, bool keep_graph, bool create_graph,
              Capture* capture);

void Run(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads, bool keep_graph, bool create_graph,
         Capture* capture) {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* outer = t_callbacks;
  t_callbacks = &callbacks;
  struct Restore {
    std::vector<std::function<void()>>* outer;
    ~Restore() { t_callbacks = outer; }
  } restore{outer};
  RunGraph(roots, root_grads, keep_graph, create_graph, capture);
  // A callback may queue another: run until none is left.
  for (size_t i = 0; i < callbacks.size(); ++i) {
    std::function<void()> cb = std::move(callbacks[i]);
    cb();
  }
}

void RunGraph(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads, bool keep_graph, bool create_graph,
              Capture* capture) {
  // 1. Dependencies over the reachable graph (and, for grad(), which nodes lead to a capture).
  absl::flat_hash_map<Node*, int> deps;
  std::vector<Node*> order;
  absl::flat_hash_set<Node*> seen;
  std::vector<Node*> stack;
  for (const Edge& e : roots) {
    if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const Edge& e : n->next_edges()) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  absl::flat_hash_set<const Node*> needed;
  if (capture) {
    // A node is needed if a capture point is at or below it. Reverse topological sweep by
    // repeated relaxation over `order` (DFS order may not be topological: iterate to a fixpoint).
    bool changed = true;
    for (auto& [n, _] : capture->at) needed.insert(n);
    while (changed) {
      changed = false;
      for (Node* n : order) {
        if (needed.count(n)) continue;
        for (const Edge& e : n->next_edges()) {
          if (e.fn && needed.count(e.fn.get())) {
            needed.insert(n);
            changed = true;
            break;
          }
        }
      }
    }
  }
  // 2. Execute.
  absl::flat_hash_map<Node*, std::vector<Tensor>> buffers;
  std::priority_queue<Node*, std::vector<Node*>, NodeCmp> ready;
  for (size_t i = 0; i < roots.size(); ++i) {
    Node* n = roots[i].fn.get();
    if (!n) continue;
    auto& buf = buffers[n];
    buf.resize(std::max<size_t>(buf.size(), n->num_outputs()));
    Accumulate(buf[roots[i].input_nr], root_grads[i]);
  }
  for (const Edge& e : roots) {
    Node* n = e.fn.get();
    if (n && deps[n] == 0) {
      ready.push(n);
      deps[n] = -1;  // queued
    }
  }
  GradMode::set_enabled(create_graph);
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[node]);
    buffers.erase(node);
    grads.resize(node->num_outputs());
    for (auto& [nr, hook] : node->pre_hooks()) {
      if (nr < grads.size() && grads[nr].defined()) {
        Tensor r = hook(grads[nr]);
        if (r.defined()) grads[nr] = r;
      }
    }
    if (capture) {
      auto it = capture->at.find(node);
      if (it != capture->at.end()) {
        for (auto [nr, ri] : it->second) {
          if (nr < grads.size()) Accumulate(capture->results[ri], grads[nr]);
        }
      }
    }
    const bool run = !capture || (needed.count(node) && !dynamic_cast<AccumulateGrad*>(node));
    std::vector<Tensor> outs;
    if (run) {
      for (int i = 0; i < node->num_outputs(); ++i) {
        if (!grads[i].defined()) {
          TensorMeta m = node->output_meta(i);
          grads[i] = zeros(m.sizes, TensorOptions(m.dtype).with_device(m.device));
        }
      }
      outs = node->apply(std::move(grads));
      if (AnomalyMode::is_enabled()) CheckFinite(*node, outs);
      if (!keep_graph) node->release_variables();
    }
    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      Node* next = edges[i].fn.get();
      if (!next) continue;
      if (run && i < outs.size() && outs[i].defined()) {
        auto& buf = buffers[next];
        buf.resize(std::max<size_t>(buf.size(), next->num_outputs()));
        Accumulate(buf[edges[i].input_nr], outs[i]);
      }
      if (--deps[next] == 0) ready.push(next);
    }
  }
}

std::vector<Tensor> RootGrads(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs) {
  ANVIL_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "backward: got ", grad_outputs.size(),
              " gradients for ", outputs.size(), " outputs");
  std::vector<Tensor> g;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    ANVIL_CHECK(o.defined(), "backward: output ", i, " is undefined");
    ANVIL_CHECK(o.requires_grad(), "element ", i,
                " of tensors does not require grad and does not have a "
                "grad_fn (was it computed under NoGradGuard, or from tensors that do not require grad?)");
    Tensor gi = i < grad_outputs.size() ? grad_outputs[i] : Tensor();
    if (!gi.defined()) {
      ANVIL_CHECK(o.numel() == 1, "grad can be implicitly created only for scalar outputs; got an output of shape ",
                  shape_str(o.sizes()), ": pass a gradient of that shape");
      gi = ones_like(o);
    } else {
      ANVIL_CHECK(gi.sizes() == o.sizes(), "backward: gradient of shape ", shape_str(gi.sizes()),
                  " does not match output of shape ", shape_str(o.sizes()));
    }
    g.push_back(gi);
  }
  return g;
}

class GradModeRestore {
 public:
  GradModeRestore() : prev_(GradMode::is_enabled()) {}
  ~GradModeRestore() { GradMode::set_enabled(prev_); }

 private:
  bool prev_;
};

}  // namespace

void queue_callback(std::function<void()> callback) {
  ANVIL_CHECK(t_callbacks != nullptr, "queue_callback: no backward pass is running on this thread");
  t_callbacks->push_back(std::move(callback));
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              std::optional<bool> retain_graph, bool create_graph) {
  std::vector<Tensor> g = RootGrads(outputs, grad_outputs);
  std::vector<Edge> roots;
  for (const Tensor& o : outputs) roots.push_back(gradient_edge(o));
  GradModeRestore restore;
  Run(roots, g, retain_graph.value_or(create_graph), create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph, bool create_graph,
                         bool allow_unused) {
  std::vector<Tensor> g = RootGrads(outputs, grad_outputs);
  std::vector<Edge> roots;
  for (const Tensor& o : outputs) roots.push_back(gradient_edge(o));
  Capture cap;
  cap.results.resize(inputs.size());
  std::vector<std::shared_ptr<Node>> keep_alive;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ANVIL_CHECK(inputs[i].requires_grad(), "grad: input ", i, " does not require grad");
    Edge e = gradient_edge(inputs[i]);
    keep_alive.push_back(e.fn);
    cap.at[e.fn.get()].emplace_back(e.input_nr, i);
  }
  {
    GradModeRestore restore;
    Run(roots, g, retain_graph.value_or(create_graph), create_graph, &cap);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    ANVIL_CHECK(allow_unused || cap.results[i].defined(), "One of the differentiated Tensors (input ", i,
                ") appears to not have been used in the graph. Set allow_unused=true if this is the "
                "desired behavior.");
  }
  return cap.results;
}

}  // namespace anvil::autograd
