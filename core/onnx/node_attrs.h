// Reading a node's attributes (ONNX's AttributeProto), with the operator's default when absent:
// shared by the importer and the QDQ fusion that runs at import.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace anvil::onnx::attrs {

// Whether a node is of ONNX's default operator domain.
inline bool DefaultDomain(const ::onnx::NodeProto& n) { return n.domain().empty() || n.domain() == "ai.onnx"; }

inline const ::onnx::AttributeProto* Find(const ::onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
inline int64_t Int(const ::onnx::NodeProto& n, const char* name, int64_t def) {
  const auto* a = Find(n, name);
  return a ? a->i() : def;
}
inline double Float(const ::onnx::NodeProto& n, const char* name, double def) {
  const auto* a = Find(n, name);
  return a ? a->f() : def;
}
inline std::string Str(const ::onnx::NodeProto& n, const char* name, const std::string& def) {
  const auto* a = Find(n, name);
  return a ? a->s() : def;
}
inline std::vector<int64_t> Ints(const ::onnx::NodeProto& n, const char* name) {
  const auto* a = Find(n, name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
}

}  // namespace anvil::onnx::attrs
