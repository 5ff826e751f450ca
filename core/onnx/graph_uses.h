// Who makes and who reads each value of an ONNX graph: the pattern matching of the importer's
// QDQ fusion (qdq_fusion.cc) and of the graph quantizer (quantize_graph.cc) asks the same
// questions of it.
//
// Thread-safety: immutable after construction; the graph must outlive it and stay unchanged.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/onnx/node_attrs.h"
#include "onnx/onnx_pb.h"

namespace anvil::onnx {

class GraphUses {
 public:
  explicit GraphUses(const ::onnx::GraphProto& g) : g_(g) {
    for (int i = 0; i < g.node_size(); ++i) {
      for (const std::string& o : g.node(i).output())
        if (!o.empty()) producer_[o] = i;
      for (const std::string& in : g.node(i).input())
        if (!in.empty()) readers_[in].push_back(i);
    }
    for (const auto& o : g.output()) graph_outputs_.insert(o.name());
  }
  // The node making `value` when it is `op` (default domain), else none.
  const ::onnx::NodeProto* MadeBy(const std::string& value, const char* op) const {
    const auto it = producer_.find(value);
    if (it == producer_.end()) return nullptr;
    const ::onnx::NodeProto& n = g_.node(it->second);
    return attrs::DefaultDomain(n) && n.op_type() == op ? &n : nullptr;
  }
  // The one node reading `value` when it is `op`, has an output, and nothing else reads
  // `value` (nor is it a graph output); else -1.
  int OnlyReader(const std::string& value, const char* op) const {
    if (graph_outputs_.count(value)) return -1;
    const auto it = readers_.find(value);
    if (it == readers_.end() || it->second.size() != 1) return -1;
    const ::onnx::NodeProto& n = g_.node(it->second[0]);
    // One output at least: a hostile file's node may have none.
    return attrs::DefaultDomain(n) && n.op_type() == op && n.output_size() >= 1 && !n.output(0).empty() ? it->second[0]
                                                                                                        : -1;
  }
  // The index of the node making `value`, or -1.
  int Producer(const std::string& value) const {
    const auto it = producer_.find(value);
    return it == producer_.end() ? -1 : it->second;
  }
  size_t Readers(const std::string& value) const {
    const auto it = readers_.find(value);
    return it == readers_.end() ? 0 : it->second.size();
  }
  bool IsGraphOutput(const std::string& value) const { return graph_outputs_.count(value) > 0; }

 private:
  const ::onnx::GraphProto& g_;
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int>> readers_;
  std::set<std::string> graph_outputs_;
};

}  // namespace anvil::onnx
