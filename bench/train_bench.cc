// Training-step throughput, Anvil vs libtorch, in one process (same harness as ops_bench:
// interleaved rounds, medians, same thread count, same initial weights and data).
//
// A step is what a training loop does per batch: zero_grad, forward, cross-entropy, backward,
// SGD update (momentum 0.9). Rows: MLP 64-128-128-10 (batch 64 and 256), MLP 784-256-10 (batch 128),
// LeNet-5 on 1x28x28 (batch 64), and Conv2d alone (forward, forward + backward).
// Optimizer steps alone (AdamW, SGD with momentum, RMSprop with momentum) on the parameters of a small and a large
// MLP: Anvil's fused step (one pass over every parameter and its state) and its per-tensor
// path (fused=0), each against libtorch's optimizer on the same tensors.
//
// PyTorch 2.x (the bench venv's, `make bench` installs it; or $ANVIL_BENCH_PYTHON) runs the
// same step and convolution rows through bench/train_peer.py right after each row, with the
// same thread count: a second table puts its times beside both.
//
// Usage: anvil_bench_train [threads] [filter]   (environment as anvil_bench_ops)
#ifdef ANVIL_BENCH_HAVE_TORCH
#include <torch/torch.h>
#endif

#include <unistd.h>

#include <cstdio>
#include <memory>

#include "bench/harness.h"
#include "core/anvil.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"

namespace {

using namespace anvil::bench;
namespace nn = anvil::nn;

using AnvilModel = std::shared_ptr<nn::Sequential>;

// PyTorch 2.x's time for a row (bench/train_peer.py), NaN when no interpreter with torch.
struct Peer2Row {
  std::string name, size;
  double anvil_ms, torch_ms, pytorch2_ms;
};
std::vector<Peer2Row> g_peer2_rows;
std::string g_pytorch2_version = "2.x";

double PyTorch2Ms(const std::string& row, int threads, int rounds) {
  const std::string python = PyTorch2Python();
  if (python.empty()) return kNaN;
  double ms = kNaN;
  for (const auto& f : RunLines(python + " " + ANVIL_BENCH_TRAIN_PEER + " " + row + " " + std::to_string(threads) +
                                " " + std::to_string(rounds) + " 2>/dev/null")) {
    if (f.size() == 2 && f[0] == "version") g_pytorch2_version = f[1];
    if (f.size() == 2 && f[0] == "ms") ms = std::atof(f[1].c_str());
  }
  return ms;
}

void AddPeer2(const Row& r, const std::string& name, const std::string& size, const std::string& peer_row,
              const Options& opt) {
  g_peer2_rows.push_back({name, size, r.anvil.ms, r.torch.ms, PyTorch2Ms(peer_row, opt.threads, opt.rounds)});
}

void PrintPeer2Table() {
  if (g_peer2_rows.empty()) return;
  std::printf("\n## Beside PyTorch %s (Python, same threads, run right after each row)\n\n",
              g_pytorch2_version.c_str());
  std::printf(
      "| op | size | anvil ms | libtorch ms | PyTorch %s ms | anvil / PyTorch %s |\n|---|---|---:|---:|---:|---:|\n",
      g_pytorch2_version.c_str(), g_pytorch2_version.c_str());
  for (const Peer2Row& r : g_peer2_rows) {
    std::printf("| %s | %s | %s | %s | %s | %s |\n", r.name.c_str(), r.size.c_str(), Fixed(r.anvil_ms, 3).c_str(),
                Fixed(r.torch_ms, 3).c_str(), std::isnan(r.pytorch2_ms) ? "n/a" : Fixed(r.pytorch2_ms, 3).c_str(),
                std::isnan(r.pytorch2_ms) ? "n/a" : Fixed(r.anvil_ms / r.pytorch2_ms, 2).c_str());
  }
}

AnvilModel Mlp(const std::vector<int64_t>& widths) {
  auto m = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    m->push_back(std::make_shared<nn::Linear>(widths[i], widths[i + 1]));
    if (i + 2 < widths.size()) m->push_back(std::make_shared<nn::ReLU>());
  }
  return m;
}

AnvilModel Lenet5() {
  using A = std::array<int64_t, 2>;
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 6, A{5, 5}, nn::ConvOptions{.padding = {2, 2}}), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(A{2, 2}), std::make_shared<nn::Conv2d>(6, 16, A{5, 5}),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(A{2, 2}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(16 * 5 * 5, 120), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(120, 84), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(84, 10)});
}

#ifdef ANVIL_BENCH_HAVE_TORCH
torch::nn::Sequential TorchMlp(const std::vector<int64_t>& widths) {
  torch::nn::Sequential m;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    m->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
    if (i + 2 < widths.size()) m->push_back(torch::nn::ReLU());
  }
  return m;
}

torch::nn::Sequential TorchLenet5() {
  namespace tn = torch::nn;
  return tn::Sequential(tn::Conv2d(tn::Conv2dOptions(1, 6, 5).padding(2)), tn::ReLU(), tn::MaxPool2d(2),
                        tn::Conv2d(6, 16, 5), tn::ReLU(), tn::MaxPool2d(2), tn::Flatten(), tn::Linear(400, 120),
                        tn::ReLU(), tn::Linear(120, 84), tn::ReLU(), tn::Linear(84, 10));
}

// Copies Anvil's initial weights into the libtorch model (same parameter order).
void CopyWeights(const AnvilModel& a, torch::nn::Sequential& t) {
  torch::NoGradGuard no_grad;
  auto ap = a->parameters();
  auto tp = t->parameters();
  if (ap.size() != tp.size()) throw std::runtime_error("parameter counts differ");
  for (size_t i = 0; i < ap.size(); ++i) tp[i].copy_(ToTorch(ap[i]).reshape(tp[i].sizes()));
}
#endif

void TrainStepRow(Table& table, const Options& options, const std::string& peer_row, const std::string& name,
                  const std::string& size, const AnvilModel& model, const anvil::Tensor& x, const anvil::Tensor& y,
                  const std::function<void*()>& make_torch_model [[maybe_unused]]) {
  if (!table.Wanted(name)) return;
  auto opt =
      std::make_shared<anvil::optim::SGD>(model->parameters(), anvil::optim::Options{{"lr", 1e-3}, {"momentum", 0.9}});
  Case c{name, size};
  // The loss of each side's first step: both start from the same weights and data, so these
  // agree; later steps differ because the sides run different numbers of steps.
  double a_first = std::nan("");
  c.anvil.run = [&] {
    opt->zero_grad();
    anvil::Tensor loss = nn::F::cross_entropy((*model)(x), y);
    loss.backward();
    opt->step();
    if (std::isnan(a_first)) a_first = loss.item<double>();
  };
#ifdef ANVIL_BENCH_HAVE_TORCH
  auto* tm = static_cast<torch::nn::Sequential*>(make_torch_model());
  std::unique_ptr<torch::nn::Sequential> owner(tm);
  CopyWeights(model, *tm);
  torch::optim::SGD topt((*tm)->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  const torch::Tensor tx = ToTorch(x), ty = ToTorch(y);
  double t_first = std::nan("");
  c.torch.run = [&] {
    topt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy((*tm)->forward(tx), ty);
    loss.backward();
    topt.step();
    if (std::isnan(t_first)) t_first = loss.item<double>();
  };
  c.check = [&] {
    return std::abs(a_first - t_first) <= 1e-4 * std::max(1.0, std::abs(t_first))
               ? std::string()
               : "first-step loss " + std::to_string(a_first) + " vs " + std::to_string(t_first);
  };
#endif
  const Row& r = table.Run(c);
  AddPeer2(r, name, size, peer_row, options);
  table.AddNote(name + " " + size + ": anvil " + Fixed(1e3 / r.anvil.ms, 0) + " steps/s, libtorch " +
                Fixed(1e3 / r.torch.ms, 0) + " steps/s");
}

// One optimizer step on fixed gradients: `kind` is "adamw", "sgd" (momentum 0.9) or "rmsprop"
// (momentum 0.9).
void OptimizerStepRow(Table& table, const std::string& kind, const std::vector<int64_t>& widths, bool fused) {
  std::string arch = "MLP";
  for (size_t i = 0; i < widths.size(); ++i) arch += (i ? "-" : " ") + std::to_string(widths[i]);
  const std::string name = kind + (fused ? " step, fused" : " step, per-tensor");
  if (!table.Wanted(name)) return;
  auto model = Mlp(widths);
  std::vector<anvil::Tensor> params = model->parameters();
  int64_t count = 0;
  for (anvil::Tensor& p : params) {
    p.set_grad(anvil::randn(p.sizes()));
    count += p.numel();
  }
  auto make = [&](std::vector<anvil::Tensor> ps) -> std::shared_ptr<anvil::optim::Optimizer> {
    anvil::optim::Options o{{"fused", fused ? 1.0 : 0.0}, {"lr", 1e-3}};
    if (kind == "adamw") return std::make_shared<anvil::optim::AdamW>(ps, o);
    o["momentum"] = 0.9;
    if (kind == "rmsprop") return std::make_shared<anvil::optim::RMSprop>(ps, o);
    return std::make_shared<anvil::optim::SGD>(ps, o);
  };
  auto opt = make(params);
  Case c{name, arch + " (" + std::to_string(count) + " parameters)"};
  c.anvil.run = [&] { opt->step(); };
#ifdef ANVIL_BENCH_HAVE_TORCH
  std::vector<torch::Tensor> tparams;
  for (const anvil::Tensor& p : params) {
    torch::Tensor t = ToTorch(p.detach()).clone().requires_grad_();
    t.mutable_grad() = ToTorch(p.grad()).clone();
    tparams.push_back(t);
  }
  std::unique_ptr<torch::optim::Optimizer> topt;
  if (kind == "adamw") {
    topt = std::make_unique<torch::optim::AdamW>(tparams, torch::optim::AdamWOptions(1e-3));
  } else if (kind == "rmsprop") {
    topt = std::make_unique<torch::optim::RMSprop>(tparams, torch::optim::RMSpropOptions(1e-3).momentum(0.9));
  } else {
    topt = std::make_unique<torch::optim::SGD>(tparams, torch::optim::SGDOptions(1e-3).momentum(0.9));
  }
  c.torch.run = [&] { topt->step(); };
  // Before timing: one step of each on copies of the same start agrees.
  std::vector<anvil::Tensor> a_copy;
  std::vector<torch::Tensor> t_copy;
  for (size_t i = 0; i < params.size(); ++i) {
    a_copy.push_back(params[i].detach().clone().requires_grad_());
    a_copy.back().set_grad(params[i].grad().clone());
    t_copy.push_back(ToTorch(a_copy.back().detach()).clone().requires_grad_());
    t_copy.back().mutable_grad() = ToTorch(params[i].grad()).clone();
  }
  make(a_copy)->step();
  if (kind == "adamw") {
    torch::optim::AdamW(t_copy, torch::optim::AdamWOptions(1e-3)).step();
  } else if (kind == "rmsprop") {
    torch::optim::RMSprop(t_copy, torch::optim::RMSpropOptions(1e-3).momentum(0.9)).step();
  } else {
    torch::optim::SGD(t_copy, torch::optim::SGDOptions(1e-3).momentum(0.9)).step();
  }
  double diff = 0;
  for (size_t i = 0; i < a_copy.size(); ++i) {
    diff = std::max(diff, (ToTorch(a_copy[i].detach()) - t_copy[i].detach()).abs().max().item<double>());
  }
  c.check = [diff] { return diff <= 1e-6 ? std::string() : "first-step difference " + std::to_string(diff); };
#endif
  table.Run(c);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = ParseOptions(argc, argv);
  anvil::set_num_threads(opt.threads);
#ifdef ANVIL_BENCH_HAVE_TORCH
  torch::set_num_threads(opt.threads);
  std::printf("# Anvil vs libtorch %s, training steps (%d threads, %s)\n\n", TORCH_VERSION, opt.threads,
              CpuModel().c_str());
#else
  std::printf("# Anvil training steps (libtorch not built in)\n\n");
#endif
  anvil::manual_seed(7);
  Table table(opt);
  table.PrintHeader();
  struct MlpRow {
    std::vector<int64_t> widths;
    int64_t batch;
  };
  for (const MlpRow& m :
       {MlpRow{{64, 128, 128, 10}, 64}, MlpRow{{64, 128, 128, 10}, 256}, MlpRow{{784, 256, 10}, 128}}) {
    std::string arch = "MLP";
    for (size_t i = 0; i < m.widths.size(); ++i) arch += (i ? "-" : " ") + std::to_string(m.widths[i]);
    auto model = Mlp(m.widths);
    const std::string peer_row = m.widths[0] == 784 ? "mlp784" : m.batch == 64 ? "mlp64" : "mlp256";
    TrainStepRow(table, opt, peer_row, arch + " step", "batch " + std::to_string(m.batch), model,
                 anvil::randn({m.batch, m.widths[0]}), anvil::randint(0, 10, {m.batch}), [&]() -> void* {
#ifdef ANVIL_BENCH_HAVE_TORCH
                   return new torch::nn::Sequential(TorchMlp(m.widths));
#else
                   return nullptr;
#endif
                 });
  }
  TrainStepRow(table, opt, "lenet5", "LeNet-5 step", "1x28x28, batch 64", Lenet5(), anvil::randn({64, 1, 28, 28}),
               anvil::randint(0, 10, {64}), []() -> void* {
#ifdef ANVIL_BENCH_HAVE_TORCH
                 return new torch::nn::Sequential(TorchLenet5());
#else
                 return nullptr;
#endif
               });
  // Conv2d alone: 16 -> 32 channels, 3x3, padding 1, on [32, 16, 28, 28].
  for (bool backward : {false, true}) {
    const std::string name = backward ? "conv2d fwd+bwd" : "conv2d fwd";
    if (!table.Wanted(name)) continue;
    anvil::Tensor x = anvil::randn({32, 16, 28, 28});
    anvil::Tensor w = (anvil::randn({32, 16, 3, 3}) * 0.1).requires_grad_(backward);
    anvil::Tensor b = anvil::zeros({32}).requires_grad_(backward);
    Case c{name, "[32,16,28,28] * [32,16,3,3], pad 1"};
    anvil::Tensor a_out;
    c.anvil.run = [&] {
      a_out = nn::F::conv2d(x, w, b, {.padding = {1, 1}});
      if (backward) a_out.sum().backward();
    };
#ifdef ANVIL_BENCH_HAVE_TORCH
    torch::Tensor tx = ToTorch(x), tw = ToTorch(w.detach()).requires_grad_(backward),
                  tb = ToTorch(b.detach()).requires_grad_(backward);
    torch::Tensor t_out;
    c.torch.run = [&] {
      t_out = torch::conv2d(tx, tw, tb, 1, 1);
      if (backward) t_out.sum().backward();
    };
    c.check = [&] {
      const double diff = (ToTorch(a_out.detach()) - t_out.detach()).abs().max().item<double>();
      return diff <= 1e-3 ? std::string() : "max difference " + std::to_string(diff);
    };
#endif
    AddPeer2(table.Run(c), name, c.size, backward ? "conv_fwd_bwd" : "conv_fwd", opt);
  }
  for (const std::string kind : {"adamw", "sgd", "rmsprop"}) {
    for (const auto& widths : {std::vector<int64_t>{64, 128, 128, 10}, std::vector<int64_t>{784, 1024, 1024, 10}}) {
      for (bool fused : {true, false}) OptimizerStepRow(table, kind, widths, fused);
    }
  }
  table.PrintNotes();
  PrintPeer2Table();
  return 0;
}
