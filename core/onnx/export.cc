#include "core/onnx/export.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "core/onnx/lower.h"
#include "core/ops/functions.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"

namespace anvil::onnx {
namespace {

using exporter::CaptureError;
namespace pb = ::onnx;

[[noreturn]] void Refuse(const std::string& what) { throw CaptureError("export: " + what); }

// ---- symbols and the captures that find them ----

// One symbolic size: where it is read from (an input's dim) and the values the captures use.
struct Symbol {
  std::string name;
  std::vector<std::pair<int64_t, int64_t>> places;  // (input, dim) pairs that carry it
  int64_t v0 = 0, v1 = 0, v2 = 0;                   // base, varied, confirming
};

// The value of symbol k in capture t: capture 0 is the base, capture k + 1 varies symbol k
// alone, the last varies all of them.
int64_t SymbolValue(const std::vector<Symbol>& syms, size_t k, size_t t) {
  const Symbol& s = syms[k];
  if (t == 0) return s.v0;
  if (t == syms.size() + 1) return s.v2;
  return t == k + 1 ? s.v1 : s.v0;
}

// A size as the captures saw it: coef * product of the symbols in `mask`.
constexpr uint32_t kFromEnd = 1u << 31;  // a slice bound or index: coef is its distance from the end
struct SymDim {
  int64_t coef = 0;
  uint32_t mask = 0;
  bool is_static() const { return mask == 0; }
  bool operator==(const SymDim&) const = default;
};

std::optional<SymDim> Fit(const std::vector<int64_t>& seen, const std::vector<Symbol>& syms) {
  const int64_t v0 = seen[0];
  if (syms.empty()) return SymDim{v0, 0};
  SymDim d;
  int64_t p0 = 1, p2 = 1;
  for (size_t k = 0; k < syms.size(); ++k) {
    const int64_t vk = seen[k + 1];
    if (vk == v0) continue;
    // Varying symbol k alone scaled the size by exactly the symbol's ratio.
    if (v0 == 0 || vk * syms[k].v0 != v0 * syms[k].v1) return std::nullopt;
    d.mask |= 1u << k;
    p0 *= syms[k].v0;
    p2 *= syms[k].v2;
  }
  if (v0 % p0 != 0) return std::nullopt;
  d.coef = v0 / p0;
  if (d.coef * p2 != seen[syms.size() + 1]) return std::nullopt;
  return d;
}

std::string DimName(const SymDim& d, const std::vector<Symbol>& syms) {
  std::string s = d.coef == 1 ? "" : std::to_string(d.coef);
  for (size_t k = 0; k < syms.size(); ++k) {
    if ((d.mask & (1u << k)) == 0) continue;
    if (!s.empty()) s += "*";
    s += syms[k].name;
  }
  return s;
}

std::string SizesAcross(const std::vector<const Lowered*>& traces, int id, const std::vector<Symbol>& syms) {
  std::string s;
  for (size_t t = 0; t < traces.size(); ++t) {
    if (t > 0) s += ", ";
    s += shape_str(traces[t]->values[static_cast<size_t>(id)].sizes);
    for (size_t k = 0; k < syms.size(); ++k) {
      s += (k == 0 ? " at " : " ") + syms[k].name + "=" + std::to_string(SymbolValue(syms, k, t));
    }
  }
  return s;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.numel() * ca.element_size())) == 0;
}

// The one value every element of `t` holds, if they all hold the same.
std::optional<Tensor> UniformValue(const Tensor& t) {
  if (t.numel() == 0) return std::nullopt;
  const Tensor flat = t.contiguous().reshape({-1});
  const Tensor first = flat.narrow(0, 0, 1).clone();
  for (int64_t i = 1; i < flat.numel(); ++i) {
    if (std::memcmp(flat.narrow(0, i, 1).contiguous().data_ptr(), first.data_ptr(),
                    static_cast<size_t>(first.element_size())) != 0) {
      return std::nullopt;
    }
  }
  return first.reshape({});
}

void FillTensor(pb::TensorProto* p, const std::string& name, const Tensor& t_in) {
  const Tensor t = t_in.to(kCPU).contiguous();
  p->set_name(name);
  for (int64_t s : t.sizes()) p->add_dims(s);
  p->set_data_type(onnx_dtype(t.dtype()));
  p->set_raw_data(
      std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel() * t.element_size())));
}

// ---- the writer: the base capture's lowered graph, sizes made symbolic ----

class Writer {
 public:
  Writer(std::vector<Lowered> traces, std::vector<Symbol> syms, const ExportOptions& options,
         const std::vector<InputSignature>& inputs)
      : traces_(std::move(traces)), syms_(std::move(syms)), options_(options), inputs_(inputs) {
    for (const Lowered& l : traces_) views_.push_back(&l);
  }

  pb::ModelProto write() {
    CheckSameGraph();
    pb::ModelProto model;
    model.set_ir_version(8);
    model.set_producer_name("anvil");
    model.set_producer_version(options_.producer_version);
    auto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(options_.opset);
    for (const auto& [k, v] : options_.metadata) {
      auto* p = model.add_metadata_props();
      p->set_key(k);
      p->set_value(v);
    }
    graph_ = model.mutable_graph();
    graph_->set_name(options_.graph_name);
    const Lowered& g = traces_[0];
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      names_[g.inputs[i]] = inputs_[i].name;
      AddValueInfo(graph_->add_input(), inputs_[i].name, g.inputs[i]);
    }
    // Graph nodes in order; the shape computations and constants they need are emitted first
    // (they depend on the inputs alone), so they go in a list of their own placed in front.
    std::vector<pb::NodeProto> body;
    // Only the nodes the outputs depend on: the forward may compute values it does not return
    // (an RNN's h_n beside its output sequence).
    std::set<int> needed(g.outputs.begin(), g.outputs.end());
    std::vector<bool> live(g.nodes.size(), false);
    for (size_t n = g.nodes.size(); n-- > 0;) {
      for (int out : g.nodes[n].outputs) live[n] = live[n] || needed.count(out) > 0;
      if (live[n]) needed.insert(g.nodes[n].inputs.begin(), g.nodes[n].inputs.end());
    }
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      if (!live[n]) continue;
      const LNode& node = g.nodes[n];
      pb::NodeProto p;
      p.set_op_type(node.op);
      p.set_name(node.origin + "_" + std::to_string(n));
      for (int in : node.inputs) p.add_input(in < 0 ? std::string() : Name(in));
      for (int out : node.outputs) p.add_output(Name(out));
      for (const auto& [key, value] : node.attrs) SetAttr(p.add_attribute(), key, value);
      body.push_back(std::move(p));
    }
    std::set<std::string> output_names;
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const std::string name =
          i < options_.output_names.size() ? options_.output_names[i] : "output" + std::to_string(i);
      ANVIL_CHECK(output_names.insert(name).second, "export: output name '", name, "' is given twice");
      const int id = g.outputs[i];
      // Every output gets its own name through an Identity (an output may be an input, a
      // constant or another output).
      pb::NodeProto p;
      p.set_op_type("Identity");
      p.set_name("output_" + std::to_string(i));
      p.add_input(Name(id));
      p.add_output(name);
      body.push_back(std::move(p));
      AddValueInfo(graph_->add_output(), name, id);
    }
    for (pb::NodeProto& p : prelude_) *graph_->add_node() = std::move(p);
    for (pb::NodeProto& p : body) *graph_->add_node() = std::move(p);
    return model;
  }

 private:
  // ---- agreement between captures ----
  void CheckSameGraph() {
    const Lowered& g = traces_[0];
    for (size_t t = 1; t < traces_.size(); ++t) {
      const Lowered& h = traces_[t];
      const size_t n = std::min(g.nodes.size(), h.nodes.size());
      for (size_t i = 0; i < n; ++i) {
        const LNode& a = g.nodes[i];
        const LNode& b = h.nodes[i];
        if (a.op != b.op || a.origin != b.origin || a.inputs != b.inputs || a.outputs != b.outputs ||
            a.attrs != b.attrs) {
          Refuse(anvil::detail::StrCat("the model's graph changes with ", Varied(t), ": its step ", i + 1, " is '",
                                       a.origin, "' (", a.op, ") at ", Base(), " but '", b.origin, "' (", b.op,
                                       ") there. The forward branches on a size that is symbolic in the export (e.g. "
                                       "`if (x.size(0) > 1)`); make the computation the same for every size, or export "
                                       "without that axis symbolic"));
        }
      }
      if (g.nodes.size() != h.nodes.size()) {
        Refuse(anvil::detail::StrCat("the model's graph changes with ", Varied(t), ": ", g.nodes.size(), " steps at ",
                                     Base(), ", ", h.nodes.size(),
                                     " there (the forward loops or branches on a symbolic size)"));
      }
      if (g.values.size() != h.values.size()) {
        Refuse(anvil::detail::StrCat("the model's graph changes with ", Varied(t),
                                     " (it reads a different number of values)"));
      }
    }
  }
  std::string Base() const {
    std::string s;
    for (const Symbol& k : syms_) s += (s.empty() ? "" : ", ") + k.name + "=" + std::to_string(k.v0);
    return s;
  }
  std::string Varied(size_t t) const {
    if (t == syms_.size() + 1) return "the symbolic sizes";
    return "'" + syms_[t - 1].name + "' (" + std::to_string(syms_[t - 1].v0) + " vs " +
           std::to_string(syms_[t - 1].v1) + ")";
  }

  // The symbolic sizes of value `id` (fitted across the captures).
  std::vector<SymDim> Sizes(int id) {
    const size_t rank = traces_[0].values[static_cast<size_t>(id)].sizes.size();
    std::vector<SymDim> dims;
    for (size_t d = 0; d < rank; ++d) {
      std::vector<int64_t> seen;
      for (const Lowered& l : traces_) {
        const IntArray& s = l.values[static_cast<size_t>(id)].sizes;
        if (s.size() != rank)
          Refuse(anvil::detail::StrCat("a value's rank changes with the sizes: ", SizesAcross(views_, id, syms_)));
        seen.push_back(s[d]);
      }
      std::optional<SymDim> fit = Fit(seen, syms_);
      if (!fit) {
        Refuse(anvil::detail::StrCat("a size of '",
                                     traces_[0].values[static_cast<size_t>(id)].maker.empty()
                                         ? "a value"
                                         : traces_[0].values[static_cast<size_t>(id)].maker,
                                     "' is not a multiple of the symbolic sizes (", SizesAcross(views_, id, syms_),
                                     "); the exporter writes sizes as products of symbolic sizes and constants"));
      }
      dims.push_back(*fit);
    }
    return dims;
  }
  std::vector<SymDim> ShapeEntries(int id) {
    const LValue& v0 = traces_[0].values[static_cast<size_t>(id)];
    std::vector<SymDim> out;
    for (size_t e = 0; e < v0.shape.size(); ++e) {
      std::vector<int64_t> seen;
      for (const Lowered& l : traces_) seen.push_back(l.values[static_cast<size_t>(id)].shape[e]);
      std::optional<SymDim> fit;
      const bool varies = std::any_of(seen.begin(), seen.end(), [&](int64_t v) { return v != seen[0]; });
      if (varies && (v0.use == LValue::kSliceBound || v0.use == LValue::kIndex)) {
        // A slice bound or index that tracks its dim's size (T, T - 1) is a fixed distance
        // from the end, which WriteShape writes as a negative bound or index.
        const std::vector<int64_t> size = DimAcross(v0.like, static_cast<size_t>(v0.like_dims[e]));
        bool relative = true;
        for (size_t t = 1; t < seen.size(); ++t) relative &= seen[t] - size[t] == seen[0] - size[0];
        if (relative) fit = SymDim{seen[0] - size[0], kFromEnd};
      }
      if (!fit) fit = Fit(seen, syms_);
      if (!fit) {
        std::string vals;
        for (int64_t s : seen) vals += (vals.empty() ? "" : ", ") + std::to_string(s);
        Refuse(anvil::detail::StrCat(
            "'", v0.maker, "' takes a size (", vals, " across the captures) that is not a product of ",
            "the symbolic sizes and a constant; compute it from tensor shapes the exporter can follow"));
      }
      out.push_back(*fit);
    }
    return out;
  }
  std::vector<int64_t> DimAcross(int id, size_t d) const {
    std::vector<int64_t> seen;
    for (const Lowered& l : traces_) seen.push_back(l.values[static_cast<size_t>(id)].sizes[d]);
    return seen;
  }

  // ---- names, constants and shape arguments ----
  std::string Name(int id) {
    if (auto it = names_.find(id); it != names_.end()) return it->second;
    const LValue& v = traces_[0].values[static_cast<size_t>(id)];
    std::string name;
    switch (v.kind) {
      case LValue::kConstant:
        name = WriteConstant(id);
        break;
      case LValue::kShape:
        name = WriteShape(id);
        break;
      default:
        name = "t" + std::to_string(id);
        break;
    }
    names_[id] = name;
    return name;
  }
  std::string Unique(std::string base) {
    std::string name = base;
    for (int i = 1; used_.count(name); ++i) name = base + "_" + std::to_string(i);
    used_.insert(name);
    return name;
  }

  std::string WriteConstant(int id) {
    const LValue& v = traces_[0].values[static_cast<size_t>(id)];
    bool same = true;
    for (size_t t = 1; t < traces_.size() && same; ++t) {
      same = SameBytes(v.constant, traces_[t].values[static_cast<size_t>(id)].constant);
    }
    const std::string name = Unique(v.name.empty() ? "const_" + std::to_string(id) : v.name);
    if (same) {
      FillTensor(graph_->add_initializer(), name, v.constant);
      return name;
    }
    // A constant that changes with the sizes: a fill of a symbolic shape (zeros(batch, h)) is
    // ConstantOfShape; anything else was computed from a size or from the data outside the
    // op table, and is refused.
    std::optional<Tensor> u = UniformValue(v.constant);
    bool uniform = u.has_value();
    for (size_t t = 1; t < traces_.size() && uniform; ++t) {
      std::optional<Tensor> ut = UniformValue(traces_[t].values[static_cast<size_t>(id)].constant);
      uniform = ut && SameBytes(*u, *ut);
    }
    const std::string made = v.maker.empty() ? "" : " read by '" + v.maker + "'";
    if (!uniform) {
      Refuse(anvil::detail::StrCat(
          "a constant", made, " (shape ", shape_str(v.sizes),
          ") changes between captures at different sizes or with different input data: the forward "
          "computed it from a size or from input values outside the graph (e.g. x / x.size(0), or "
          "data read through data_ptr), so a fixed number would be baked in. Compute it with tensor "
          "ops on the input instead"));
    }
    const std::vector<SymDim> dims = Sizes(id);
    pb::NodeProto p;
    p.set_op_type("ConstantOfShape");
    p.set_name(name + "_fill");
    p.add_input(Materialize(dims));
    p.add_output(name);
    pb::AttributeProto* a = p.add_attribute();
    a->set_name("value");
    a->set_type(pb::AttributeProto::TENSOR);
    FillTensor(a->mutable_t(), "", u->reshape({1}));
    prelude_.push_back(std::move(p));
    return name;
  }

  std::string WriteShape(int id) {
    const LValue& v = traces_[0].values[static_cast<size_t>(id)];
    std::vector<SymDim> entries = ShapeEntries(id);
    IntArray fixed(entries.size());
    std::vector<bool> symbolic(entries.size());
    for (size_t e = 0; e < entries.size(); ++e) {
      fixed[e] = entries[e].coef;
      symbolic[e] = !entries[e].is_static();
      if (entries[e].mask == kFromEnd) {  // a distance from the end (ShapeEntries)
        symbolic[e] = false;
        if (fixed[e] == 0 && v.use == LValue::kSliceBound) fixed[e] = std::numeric_limits<int64_t>::max();
      }
    }
    switch (v.use) {
      case LValue::kReshapeTarget: {
        // One symbolic entry: -1 there, and the target is a constant (Reshape infers it).
        int n = 0;
        size_t at = 0;
        for (size_t e = 0; e < entries.size(); ++e)
          if (symbolic[e]) ++n, at = e;
        if (n == 1) {
          fixed[at] = -1;
          symbolic[at] = false;
        }
        break;
      }
      case LValue::kExpandTarget: {
        // Entries that keep the input's dim can say 1 (Expand broadcasts both ways).
        const std::vector<SymDim> in = Sizes(v.like);
        const size_t lead = entries.size() - in.size();
        for (size_t e = lead; e < entries.size(); ++e) {
          if (entries[e] == in[e - lead]) {
            fixed[e] = 1;
            symbolic[e] = false;
          }
        }
        break;
      }
      case LValue::kSliceBound:  // distances from the end: resolved in ShapeEntries
      case LValue::kIndex:
      case LValue::kPlain:
        break;
    }
    bool any = false;
    for (bool s : symbolic) any |= s;
    const std::string name = Unique(v.maker + "_shape_" + std::to_string(id));
    if (!any) {
      Tensor t = empty({static_cast<int64_t>(fixed.size())}, TensorOptions(kInt64));
      for (size_t e = 0; e < fixed.size(); ++e) t.data_ptr<int64_t>()[e] = fixed[e];
      FillTensor(graph_->add_initializer(), name, t);
      return name;
    }
    std::vector<SymDim> parts;
    for (size_t e = 0; e < entries.size(); ++e) parts.push_back(symbolic[e] ? entries[e] : SymDim{fixed[e], 0});
    pb::NodeProto p;
    p.set_op_type("Identity");
    p.set_name(name);
    p.add_input(Materialize(parts));
    p.add_output(name);
    prelude_.push_back(std::move(p));
    return name;
  }

  // A 1-D int64 tensor of `dims`, computed from the inputs' shapes where symbolic.
  std::string Materialize(const std::vector<SymDim>& dims) {
    std::vector<std::string> parts;
    for (const SymDim& d : dims) parts.push_back(Entry(d));
    if (parts.size() == 1) return parts[0];
    const std::string name = Unique("shape");
    pb::NodeProto p;
    p.set_op_type("Concat");
    p.set_name(name);
    for (const std::string& s : parts) p.add_input(s);
    p.add_output(name);
    SetAttr(p.add_attribute(), "axis", int64_t{0});
    prelude_.push_back(std::move(p));
    return name;
  }
  std::string Entry(const SymDim& d) {
    const auto key = std::make_pair(d.coef, d.mask);
    if (auto it = entries_.find(key); it != entries_.end()) return it->second;
    std::string name;
    if (d.is_static()) {
      name = Unique("dim_" + std::to_string(d.coef));
      FillTensor(graph_->add_initializer(), name, full({1}, d.coef, TensorOptions(kInt64)));
    } else {
      std::string acc;
      for (size_t k = 0; k < syms_.size(); ++k) {
        if ((d.mask & (1u << k)) == 0) continue;
        const std::string s = SymbolTensor(k);
        acc = acc.empty() ? s : Binary("Mul", acc, s);
      }
      if (d.coef != 1) acc = Binary("Mul", acc, Entry(SymDim{d.coef, 0}));
      name = acc;
    }
    entries_[key] = name;
    return name;
  }
  std::string Binary(const char* op, const std::string& a, const std::string& b) {
    const std::string name = Unique(std::string(op) == "Mul" ? "dim_mul" : "dim_op");
    pb::NodeProto p;
    p.set_op_type(op);
    p.set_name(name);
    p.add_input(a);
    p.add_input(b);
    p.add_output(name);
    prelude_.push_back(std::move(p));
    return name;
  }
  // Symbol k as a 1-element int64 tensor: Gather(Shape(input), [dim]).
  std::string SymbolTensor(size_t k) {
    if (auto it = symbol_tensors_.find(k); it != symbol_tensors_.end()) return it->second;
    const auto [input, dim] = syms_[k].places[0];
    const std::string shape = Unique(inputs_[static_cast<size_t>(input)].name + "_shape");
    {
      pb::NodeProto p;
      p.set_op_type("Shape");
      p.set_name(shape);
      p.add_input(inputs_[static_cast<size_t>(input)].name);
      p.add_output(shape);
      prelude_.push_back(std::move(p));
    }
    const std::string name = Unique(syms_[k].name);
    pb::NodeProto p;
    p.set_op_type("Gather");
    p.set_name(name);
    p.add_input(shape);
    p.add_input(Entry(SymDim{dim, 0}));
    p.add_output(name);
    SetAttr(p.add_attribute(), "axis", int64_t{0});
    prelude_.push_back(std::move(p));
    symbol_tensors_[k] = name;
    return name;
  }

  void AddValueInfo(pb::ValueInfoProto* info, const std::string& name, int id) {
    info->set_name(name);
    auto* tensor = info->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx_dtype(traces_[0].values[static_cast<size_t>(id)].dtype));
    auto* shape = tensor->mutable_shape();
    for (const SymDim& d : Sizes(id)) {
      auto* dim = shape->add_dim();
      if (d.is_static()) {
        dim->set_dim_value(d.coef);
      } else {
        dim->set_dim_param(DimName(d, syms_));
      }
    }
  }

  static void SetAttr(pb::AttributeProto* a, const std::string& key, const AttrValue& value) {
    a->set_name(key);
    if (const auto* i = std::get_if<int64_t>(&value)) {
      a->set_type(pb::AttributeProto::INT);
      a->set_i(*i);
    } else if (const auto* f = std::get_if<double>(&value)) {
      a->set_type(pb::AttributeProto::FLOAT);
      a->set_f(static_cast<float>(*f));
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      a->set_type(pb::AttributeProto::STRING);
      a->set_s(*s);
    } else if (const auto* is = std::get_if<std::vector<int64_t>>(&value)) {
      a->set_type(pb::AttributeProto::INTS);
      for (int64_t v : *is) a->add_ints(v);
    } else if (const auto* fs = std::get_if<std::vector<double>>(&value)) {
      a->set_type(pb::AttributeProto::FLOATS);
      for (double v : *fs) a->add_floats(static_cast<float>(v));
    } else if (const auto* ss = std::get_if<std::vector<std::string>>(&value)) {
      a->set_type(pb::AttributeProto::STRINGS);
      for (const std::string& v : *ss) a->add_strings(v);
    }
  }

  std::vector<Lowered> traces_;
  std::vector<const Lowered*> views_;
  std::vector<Symbol> syms_;
  const ExportOptions& options_;
  const std::vector<InputSignature>& inputs_;
  pb::GraphProto* graph_ = nullptr;
  std::vector<pb::NodeProto> prelude_;
  std::map<int, std::string> names_;
  std::set<std::string> used_;
  std::map<std::pair<int64_t, uint32_t>, std::string> entries_;
  std::map<size_t, std::string> symbol_tensors_;
};

// Three distinct values for a symbolic size whose capture value is `n` (the signature's), the
// smaller ones first so models with a maximum length (positions) accept them.
void ChooseValues(Symbol& s, int64_t n) {
  if (n >= 3) {
    s.v0 = n;
    s.v1 = n - 1;
    s.v2 = n - 2;
  } else {
    s.v0 = n;
    s.v1 = n + 1;
    s.v2 = n + 2;
  }
}

// Capture inputs: floats in [-1, 1) from a local generator (the process's default generator
// is left alone), different for each capture so that a constant read from the data is caught;
// integers (token ids, indices) are zeros, in range for any embedding.
Tensor SampleInput(const InputSignature& sig, const IntArray& shape, uint64_t seed) {
  if (sig.dtype != kFloat32) return zeros(shape, TensorOptions(sig.dtype));
  Tensor t = empty(shape, TensorOptions(kFloat32));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    p[i] = static_cast<float>(state >> 40) / static_cast<float>(1ull << 23) - 1.0f;
  }
  return t;
}

// Folds each inference BatchNormalization into the Conv or Gemm (transB, as Linear lowers) that
// alone feeds it: with s = scale / sqrt(var + eps) per channel, W' = W * s and
// b' = (b - mean) * s + B, computed in float64. Equal in exact arithmetic; within float
// rounding in the file.
void FoldBatchNorm(Lowered& g) {
  std::vector<int> uses(g.values.size(), 0), producer(g.values.size(), -1);
  for (int out : g.outputs) ++uses[static_cast<size_t>(out)];
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    for (int in : g.nodes[n].inputs)
      if (in >= 0) ++uses[static_cast<size_t>(in)];
    for (int out : g.nodes[n].outputs) producer[static_cast<size_t>(out)] = static_cast<int>(n);
  }
  auto constant = [&](int id) -> const Tensor* {
    return id >= 0 && g.values[static_cast<size_t>(id)].kind == LValue::kConstant
               ? &g.values[static_cast<size_t>(id)].constant
               : nullptr;
  };
  auto attr = [](const LNode& node, const char* key, int64_t def) {
    for (const auto& [k, v] : node.attrs)
      if (k == key) return std::get<int64_t>(v);
    return def;
  };
  std::vector<bool> removed(g.nodes.size(), false);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    LNode& bn = g.nodes[n];
    if (bn.op != "BatchNormalization" || bn.inputs.size() != 5) continue;
    const Tensor *scale = constant(bn.inputs[1]), *shift = constant(bn.inputs[2]), *mean = constant(bn.inputs[3]),
                 *var = constant(bn.inputs[4]);
    const int x = bn.inputs[0];
    if (!scale || !shift || !mean || !var || x < 0 || uses[static_cast<size_t>(x)] != 1) continue;
    const int p = producer[static_cast<size_t>(x)];
    if (p < 0) continue;
    LNode& prev = g.nodes[static_cast<size_t>(p)];
    const bool conv = prev.op == "Conv", gemm = prev.op == "Gemm" && attr(prev, "transB", 0) == 1 &&
                                                attr(prev, "transA", 0) == 0 && prev.attrs.size() == 1;
    if (!conv && !gemm) continue;
    const Tensor* w = constant(prev.inputs[1]);
    const Tensor* b = prev.inputs.size() > 2 ? constant(prev.inputs[2]) : nullptr;
    if (!w || (prev.inputs.size() > 2 && !b) || w->size(0) != scale->numel()) continue;
    double eps = 1e-5;
    for (const auto& [k, v] : bn.attrs)
      if (k == "epsilon") eps = std::get<double>(v);
    const Tensor s = scale->to(kFloat64) / sqrt(var->to(kFloat64) + eps);
    IntArray per_out(static_cast<size_t>(w->dim()), 1);
    per_out[0] = w->size(0);
    const Tensor w2 = (w->to(kFloat64) * s.reshape(per_out)).to(w->dtype()).contiguous();
    const Tensor b0 = b ? b->to(kFloat64) : zeros({w->size(0)}, TensorOptions(kFloat64));
    const Tensor b2 = ((b0 - mean->to(kFloat64)) * s + shift->to(kFloat64)).to(w->dtype()).contiguous();
    auto add_constant = [&](const Tensor& t, const std::string& name) {
      LValue v;
      v.kind = LValue::kConstant;
      v.constant = t;
      v.sizes = t.sizes();
      v.dtype = t.dtype();
      v.name = name;
      g.values.push_back(std::move(v));
      return static_cast<int>(g.values.size()) - 1;
    };
    const std::string base = g.values[static_cast<size_t>(prev.inputs[1])].name;
    prev.inputs[1] = add_constant(w2, base.empty() ? "" : base + "_folded");
    const int bias_id = add_constant(b2, base.empty() ? "" : base + "_folded_bias");
    if (prev.inputs.size() > 2) {
      prev.inputs[2] = bias_id;
    } else {
      prev.inputs.push_back(bias_id);
    }
    prev.outputs = bn.outputs;
    removed[n] = true;
  }
  std::vector<LNode> kept;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (!removed[n]) kept.push_back(std::move(g.nodes[n]));
  g.nodes = std::move(kept);
}

}  // namespace

SymbolicAxis parse_dynamic_axis(const std::string& text, const std::vector<InputSignature>& inputs) {
  const size_t colon = text.find(':'), eq = text.find('=');
  ANVIL_CHECK(colon != std::string::npos && eq != std::string::npos && colon < eq && eq + 1 < text.size(),
              "dynamic axis: expected INPUT:DIM=NAME (e.g. input:1=seq), got '", text, "'");
  const std::string input = text.substr(0, colon), dim = text.substr(colon + 1, eq - colon - 1);
  SymbolicAxis axis;
  axis.name = text.substr(eq + 1);
  axis.input = -1;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].name == input) axis.input = static_cast<int64_t>(i);
  if (axis.input < 0 && !input.empty() && input.find_first_not_of("0123456789") == std::string::npos) {
    axis.input = std::stoll(input);
  }
  ANVIL_CHECK(axis.input >= 0 && axis.input < static_cast<int64_t>(inputs.size()), "dynamic axis '", text,
              "': no input named or numbered '", input, "' (the model has ", inputs.size(), ")");
  ANVIL_CHECK(!dim.empty() && dim.size() < 4 && dim.find_first_not_of("0123456789") == std::string::npos,
              "dynamic axis '", text, "': expected a dim number after ':', got '", dim, "'");
  axis.dim = std::stoll(dim);
  const auto rank = static_cast<int64_t>(inputs[static_cast<size_t>(axis.input)].shape.size()) + 1;
  ANVIL_CHECK(axis.dim >= 1 && axis.dim < rank, "dynamic axis '", text, "': dim ", axis.dim,
              " is not a non-batch dim of input '", inputs[static_cast<size_t>(axis.input)].name, "' (dims 1..",
              rank - 1, "; dim 0 is the batch)");
  ANVIL_CHECK(!axis.name.empty() && axis.name != "batch", "dynamic axis '", text,
              "': the symbol needs a name other than 'batch'");
  return axis;
}

std::string export_forward(const exporter::Forward& forward, const exporter::ConstantNames& constant_names,
                           const std::vector<InputSignature>& inputs, const ExportOptions& options) {
  ANVIL_CHECK(options.opset >= kMinOpset && options.opset <= kMaxOpset, "export: opset ", options.opset,
              " is not supported: expected ", kMinOpset, " to ", kMaxOpset);
  ANVIL_CHECK(!inputs.empty(), "export: the model has no inputs");
  std::vector<Symbol> syms;
  if (options.dynamic_batch) {
    Symbol batch{"batch", {}, 2, 3, 5};
    for (size_t i = 0; i < inputs.size(); ++i) batch.places.emplace_back(static_cast<int64_t>(i), 0);
    syms.push_back(batch);
  }
  for (const SymbolicAxis& a : options.dynamic_axes) {
    ANVIL_CHECK(a.input >= 0 && a.input < static_cast<int64_t>(inputs.size()) && a.dim >= 1 &&
                    a.dim <= static_cast<int64_t>(inputs[static_cast<size_t>(a.input)].shape.size()),
                "export: dynamic axis ", a.name, " (input ", a.input, ", dim ", a.dim, ") is not a dim of an input");
    Symbol* s = nullptr;
    for (Symbol& k : syms)
      if (k.name == a.name) s = &k;
    if (s == nullptr) {
      syms.push_back(Symbol{a.name, {}, 0, 0, 0});
      s = &syms.back();
      ChooseValues(*s, inputs[static_cast<size_t>(a.input)].shape[static_cast<size_t>(a.dim - 1)]);
    }
    s->places.emplace_back(a.input, a.dim);
  }
  ANVIL_CHECK(syms.size() <= 8, "export: at most 8 symbolic axes, got ", syms.size());
  // Captures: the base, each symbol varied alone, all varied (one capture when all is static).
  const size_t captures = syms.empty() ? 1 : syms.size() + 2;
  std::vector<Lowered> traces;
  std::vector<std::string> names;
  for (const InputSignature& s : inputs) names.push_back(s.name);
  for (size_t t = 0; t < captures; ++t) {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      IntArray shape{1};
      shape.insert(shape.end(), inputs[i].shape.begin(), inputs[i].shape.end());
      if (!options.dynamic_batch) shape[0] = 1;
      for (size_t k = 0; k < syms.size(); ++k) {
        for (const auto& [input, dim] : syms[k].places) {
          if (input == static_cast<int64_t>(i)) shape[static_cast<size_t>(dim)] = SymbolValue(syms, k, t);
        }
      }
      xs.push_back(SampleInput(inputs[i], shape, 0x5eed + t * 131 + i).to(options.device));
    }
    traces.push_back(lower(exporter::capture(forward, xs, names, constant_names), options.opset));
    if (options.fold_batch_norm) FoldBatchNorm(traces.back());
  }
  Writer writer(std::move(traces), std::move(syms), options, inputs);
  pb::ModelProto model = writer.write();
  try {
    pb::checker::check_model(model);
    pb::shape_inference::InferShapes(model, pb::OpSchemaRegistry::Instance(),
                                     pb::ShapeInferenceOptions(/*check_type=*/true, /*strict_mode=*/1));
  } catch (const std::exception& e) {
    throw InternalError(anvil::detail::StrCat("export: the written graph fails ONNX's checks: ", e.what()));
  }
  std::string bytes;
  ANVIL_CHECK(model.SerializeToString(&bytes), "export: serializing the ONNX model failed");
  return bytes;
}

std::string export_model(nn::Module& module, const std::vector<InputSignature>& inputs, const ExportOptions& options) {
  for (const auto& [name, m] : module.named_modules()) {
    if (m->is_training()) {
      throw CaptureError(anvil::detail::StrCat(
          "export: the model is in training mode (module '", name.empty() ? m->type_name() : name, "' ",
          name.empty() ? "" : "(" + m->type_name() + ") ",
          "would drop activations in dropout and normalise by batch statistics); call eval() before exporting"));
    }
  }
  ANVIL_CHECK(inputs.size() == 1, "export: nn::Module's forward takes one input, the signature has ", inputs.size());
  exporter::ConstantNames constants = module.named_parameters();
  for (auto& b : module.named_buffers()) constants.push_back(std::move(b));
  ExportOptions placed = options;
  if (!constants.empty()) placed.device = constants.front().second.device();
  return export_forward([&module](const std::vector<Tensor>& xs) { return std::vector<Tensor>{module.forward(xs[0])}; },
                        constants, inputs, placed);
}

}  // namespace anvil::onnx
