// PyTorch conformance: every case of the golden files (written by PyTorch 2.x through
// tests/conformance/make_golden.py) run in Anvil, comparing dtypes, shapes, values, gradients
// and "raises"; then a walk over the op table that fails for any row no case reaches.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops/op_trace.h"
#include "tests/conformance/bindings.h"
#include "tests/paths.h"

namespace anvil::conformance {
namespace {

using json = nlohmann::json;

const char* const kGroups[] = {"promotion",     "elementwise", "reductions", "losses",    "nn",
                               "optim",         "sched",       "indexing",   "views",     "factories",
                               "float_classes", "corners",     "additions",  "selection", "dtypes",
                               "rnn2",          "layers2",     "ops3",       "quant",     "qlayers"};

// Where Anvil deliberately differs from PyTorch (docs/pitfalls.md, "Deliberate differences"):
// PyTorch computes, Anvil refuses with a message that says why. The case must raise in Anvil.
const std::map<std::string, std::string>& AnvilRaises() {
  static const std::map<std::string, std::string> m = {
      {"losses/mse_loss.broadcast",
       "a target shaped unlike the input is almost always a bug (PyTorch only warns, then broadcasts [4, 3] "
       "against [3]); Anvil refuses and names both shapes"},
  };
  return m;
}

// Cases where Anvil's values differ from PyTorch's on purpose (docs/pitfalls.md), and cases
// that still fail, with why. Each must still differ (a fixed one must leave the list), so the
// list is always the truth about what the suite does not pass.
const std::map<std::string, std::string>& KnownGaps() {
  static const std::map<std::string, std::string> m = {
      {"elementwise/gelu.special",
       "deliberate: gelu(inf) is inf in Anvil (the limit of x * Phi(x)); PyTorch 2.x's vectorised CPU kernel gives "
       "NaN"},
  };
  return m;
}

// Op-table rows no golden case can reach, with why.
const std::map<std::string, std::string>& UnreachableRows() {
  static const std::map<std::string, std::string> m = {
      {"uniform", "random draws: Anvil's Philox streams are not PyTorch's (distributions are tested in random_test)"},
      {"normal", "random draws: Anvil's Philox streams are not PyTorch's (distributions are tested in random_test)"},
      {"bernoulli", "random draws: Anvil's Philox streams are not PyTorch's (dropout's mask likewise)"},
  };
  return m;
}

std::string Dir() {
  const char* env = std::getenv("ANVIL_CONFORMANCE_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : anvil::test::SourceDir() + "/tests/conformance/golden";
}

struct GoldenFile {
  std::string group;
  io::Safetensors file;
  std::vector<Case> cases;
};

const GoldenFile& Load(const std::string& group) {
  static std::map<std::string, std::unique_ptr<GoldenFile>> cache;
  auto& slot = cache[group];
  if (!slot) {
    slot = std::make_unique<GoldenFile>();
    slot->group = group;
    slot->file = io::load_safetensors(Dir() + "/" + group + ".safetensors");
    for (const auto& [key, value] : slot->file.metadata) {
      if (key.rfind("__", 0) == 0) continue;
      Case c;
      c.group = group;
      c.name = key;
      c.meta = json::parse(value);
      c.file = &slot->file;
      slot->cases.push_back(std::move(c));
    }
  }
  return *slot;
}

const std::string* Lookup(const std::map<std::string, std::string>& m, const std::string& id) {
  const auto it = m.find(id);
  return it == m.end() ? nullptr : &it->second;
}

std::string ShapeStr(const Tensor& t) {
  std::ostringstream s;
  s << "[";
  for (int64_t d = 0; d < t.dim(); ++d) s << (d ? ", " : "") << t.size(d);
  s << "]";
  return s.str();
}

// "" when `got` matches `want`: same dtype and shape, values within atol + rtol |want| (NaN
// where NaN, infinities of the same sign; integers and bools exactly). `strict` (the cases of
// the float-class sweeps): the case's tolerances as given, also for 16-bit floats, and zeros
// of the same sign. `zero_signs`: zeros of the same sign (every case's outputs; gradients'
// zero signs are left to the strict cases).
std::string Compare(const Tensor& got, const Tensor& want, double rtol, double atol, bool strict = false,
                    bool zero_signs = false) {
  zero_signs = zero_signs || strict;
  if (!got.defined()) return "no tensor (PyTorch has one)";
  if (got.dtype() != want.dtype()) {
    return "dtype " + std::string(dtype_name(got.dtype())) + ", PyTorch " + std::string(dtype_name(want.dtype()));
  }
  if (got.sizes() != want.sizes()) return "shape " + ShapeStr(got) + ", PyTorch " + ShapeStr(want);
  if (strict && is_floating_point(got.dtype())) {
    // as given
  } else if (got.dtype() == kFloat16) {
    rtol = std::max(rtol, 1e-3);
    atol = std::max(atol, 1e-3);
  } else if (got.dtype() == kBFloat16) {
    rtol = std::max(rtol, 1e-2);
    atol = std::max(atol, 1e-2);
  } else if (!is_floating_point(got.dtype())) {
    rtol = atol = 0;
  }
  const std::vector<double> g = got.detach().contiguous().to(kFloat64).to_vector<double>();
  const std::vector<double> w = want.contiguous().to(kFloat64).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = std::isnan(w[i])   ? std::isnan(g[i])
                    : std::isinf(w[i]) ? g[i] == w[i]
                                       : std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]);
    if (ok && zero_signs && g[i] == 0 && w[i] == 0 && std::signbit(g[i]) != std::signbit(w[i])) {
      std::ostringstream s;
      s << "element " << i << " is " << (std::signbit(g[i]) ? "-0" : "+0") << ", PyTorch "
        << (std::signbit(w[i]) ? "-0" : "+0");
      return s.str();
    }
    if (!ok) {
      std::ostringstream s;
      s.precision(9);
      s << "element " << i << " is " << g[i] << ", PyTorch " << w[i] << " (rtol " << rtol << ", atol " << atol << ")";
      return s.str();
    }
  }
  return "";
}

// While it lives, the op trace (if one runs) marks the rows the binding's own ops reach,
// not the harness's loading and comparing.
class Traced {
 public:
  Traced() {
    if (OpTrace* t = OpTrace::current()) t->set_enabled(true);
  }
  ~Traced() {
    if (OpTrace* t = OpTrace::current()) t->set_enabled(false);
  }
};

// Runs one case; returns what differs from PyTorch ("" when nothing does).
std::string Run(const Case& c) {
  const auto& all = bindings();
  const std::string fn = c.meta.at("fn").get<std::string>();
  const auto it = all.find(fn);
  if (it == all.end()) return "no binding for fn '" + fn + "'";
  const double rtol = c.meta.at("rtol").get<double>(), atol = c.meta.at("atol").get<double>();
  const int64_t n_in = c.meta.at("n_in").get<int64_t>();
  std::vector<Tensor> inputs;
  std::set<int64_t> grad_of, requires_grad;
  for (const auto& g : c.meta.at("grad")) grad_of.insert(g.get<int64_t>());
  for (const auto& g : c.meta.value("requires_grad", c.meta.at("grad"))) requires_grad.insert(g.get<int64_t>());
  const bool raises = !c.meta.at("raises").is_null();
  for (int64_t i = 0; i < n_in; ++i) {
    Tensor t = c.get("in" + std::to_string(i));
    if (requires_grad.count(i)) t.requires_grad_(true);
    inputs.push_back(t);
  }
  Result r;
  try {
    Traced traced;
    r = it->second(c, inputs);
  } catch (const BindingError& e) {
    return std::string("binding: ") + e.what();
  } catch (const std::exception& e) {
    if (raises) return "";
    return std::string("raised: ") + e.what();
  }
  if (raises) return "computed where PyTorch raised (" + c.meta.at("raises").get<std::string>() + ")";
  const int64_t n_out = c.meta.at("n_out").get<int64_t>();
  if (static_cast<int64_t>(r.outputs.size()) != n_out) {
    return std::to_string(r.outputs.size()) + " outputs, PyTorch " + std::to_string(n_out);
  }
  for (int64_t i = 0; i < n_out; ++i) {
    const std::string d =
        Compare(r.outputs[i], c.get("out" + std::to_string(i)), rtol, atol, c.meta.value("strict", false),
                /*zero_signs=*/true);
    if (!d.empty()) return "output " + std::to_string(i) + ": " + d;
  }
  for (const Extra& e : r.extra) {
    if (!e.want.defined()) return e.what;
    const std::string d = Compare(e.got, e.want, std::max(rtol, 1e-4), std::max(atol, 1e-5));
    if (!d.empty()) return e.what + ": " + d;
  }
  if (grad_of.empty()) return "";
  std::vector<Tensor> outs, gouts, wrt;
  for (const auto& o : c.meta.at("gout_of")) {
    const int64_t i = o.get<int64_t>();
    if (!r.outputs[i].requires_grad()) return "output " + std::to_string(i) + " does not require grad (PyTorch's does)";
    outs.push_back(r.outputs[i]);
    gouts.push_back(c.get("gout" + std::to_string(i)));
  }
  std::set<int64_t> none;
  for (const auto& g : c.meta.at("grad_none")) none.insert(g.get<int64_t>());
  for (int64_t i : grad_of) wrt.push_back(inputs[i]);
  if (outs.empty()) return "";
  std::vector<Tensor> grads;
  try {
    Traced traced;
    grads = autograd::grad(outs, wrt, gouts, std::nullopt, false, /*allow_unused=*/true);
  } catch (const std::exception& e) {
    return std::string("backward raised: ") + e.what();
  }
  size_t k = 0;
  for (int64_t i : grad_of) {
    const Tensor& g = grads[k++];
    if (none.count(i)) {
      // PyTorch: no path to this input. Anvil may give none or zeros.
      if (g.defined() && g.ne(zeros_like(g)).any().item<bool>())
        return "gradient of input " + std::to_string(i) + " is nonzero; PyTorch has none";
      continue;
    }
    const Tensor want = c.get("grad" + std::to_string(i));
    const std::string d = Compare(g.defined() ? g : zeros_like(want), want, std::max(rtol, 1e-4), std::max(atol, 1e-5));
    if (!d.empty()) return "gradient of input " + std::to_string(i) + ": " + d;
  }
  return "";
}

// Runs every case of a group against the two lists; the failures, one line each.
std::vector<std::string> RunGroup(const std::string& group, int* ran) {
  std::vector<std::string> failures;
  const GoldenFile& f = Load(group);
  for (const Case& c : f.cases) {
    const std::string id = group + "/" + c.name;
    const std::string call = c.meta.at("call").get<std::string>();
    std::string diff = Run(c);
    if (const std::string* why = Lookup(AnvilRaises(), id)) {
      // Deliberate: PyTorch computes, Anvil must refuse.
      if (diff.rfind("raised: ", 0) != 0)
        failures.push_back(id + " [" + call + "]: expected Anvil to refuse (" + *why + ")");
      ++*ran;
      continue;
    }
    if (const std::string* why = Lookup(KnownGaps(), id)) {
      if (diff.empty())
        failures.push_back(id + " [" + call + "]: passes now; take it off the known gaps (" + *why + ")");
      ++*ran;
      continue;
    }
    if (!diff.empty()) failures.push_back(id + " [" + call + "]: " + diff);
    ++*ran;
  }
  return failures;
}

class Conformance : public ::testing::TestWithParam<const char*> {};

TEST_P(Conformance, MatchesPyTorch) {
  int ran = 0;
  const std::vector<std::string> failures = RunGroup(GetParam(), &ran);
  EXPECT_GT(ran, 0);
  std::ostringstream s;
  for (const std::string& f : failures) s << "\n  " << f;
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << ran << " cases differ from PyTorch:" << s.str();
}

INSTANTIATE_TEST_SUITE_P(Golden, Conformance, ::testing::ValuesIn(kGroups),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// The suite walks the op table: every row is reached by some case (forward or backward), or
// is listed as unreachable with a reason.
TEST(ConformanceSuite, EveryOpTableRowIsReachedByACase) {
  std::vector<std::string> unreached;
  {
    OpTrace trace;
    trace.set_enabled(false);  // on only inside each case's call and backward (Traced)
    int ran = 0;
    for (const char* g : kGroups) RunGroup(g, &ran);
    for (int i = 0; i < kNumOps; ++i) {
      const OpId op = static_cast<OpId>(i);
      if (trace.seen(op)) continue;
      const std::string name(op_name(op));
      if (Lookup(UnreachableRows(), name) != nullptr) continue;
      unreached.push_back(name);
    }
  }
  std::ostringstream s;
  for (const std::string& n : unreached) s << " " << n;
  EXPECT_TRUE(unreached.empty()) << "op-table rows no conformance case reaches (add a case to "
                                    "tests/conformance/make_golden.py):"
                                 << s.str();
}

// The golden files say which PyTorch wrote them, and there are several hundred cases.
TEST(ConformanceSuite, GoldenFilesNameTheirPyTorchAndHoldSeveralHundredCases) {
  size_t total = 0;
  for (const char* g : kGroups) {
    const GoldenFile& f = Load(g);
    const auto it = f.file.metadata.find("__torch__");
    ASSERT_NE(it, f.file.metadata.end()) << g;
    EXPECT_EQ(it->second.rfind("2.", 0), 0u) << g << " was written by PyTorch " << it->second;
    total += f.cases.size();
  }
  EXPECT_GE(total, 300u);
}

// A file the reference writer made with every second tensor empty (0-byte entries share
// their start offset with a neighbour) loads, with every tensor's contents.
TEST(ConformanceSuite, TheReferenceWritersEmptyTensorsLoad) {
  const io::Safetensors st = io::load_safetensors(Dir() + "/edge_empty_tensors.safetensors");
  EXPECT_EQ(st.tensors.size(), 42u);
  for (int i = 0; i < 40; ++i) {
    char name[8];
    std::snprintf(name, sizeof(name), "t%03d", i);
    const Tensor* t = st.find(name);
    ASSERT_NE(t, nullptr) << name;
    if (i % 2) {
      EXPECT_EQ(t->numel(), 0) << name;
    } else {
      EXPECT_TRUE(equal(*t, full({i + 1}, static_cast<double>(i)))) << name;
    }
  }
  ASSERT_NE(st.find("empty2d"), nullptr);
  EXPECT_EQ(st.find("empty2d")->sizes(), (IntArray{3, 0}));
  EXPECT_EQ(st.find("scalar")->item<float>(), 7.0f);
}

}  // namespace
}  // namespace anvil::conformance
