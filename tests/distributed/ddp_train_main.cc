// A data-parallel training program for the tests: an MLP on a synthetic 4-class problem,
// trained for --steps optimizer steps with a global batch of 64 split across the ranks the
// environment names (one process when it names none), through the Trainer and
// DistributedDataParallel. Rank 0 writes the final parameters to --out and prints the
// validation result, so a test compares N ranks with one process.
//
//   ddp_train_main --optimizer sgd|adamw --steps 100 --out params.safetensors
//                  [--checkpoint PATH --checkpoint-every K] [--step-delay-ms MS]
//   ddp_train_main --compare A B    max relative difference of two parameter files; exit 1
//                                   above --rtol (default 1e-6), 0 otherwise
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "core/anvil.h"
#include "core/data/data.h"
#include "core/distributed/ddp.h"
#include "core/distributed/environment.h"
#include "core/distributed/samplers.h"
#include "core/io/safetensors.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/train/trainer.h"

using namespace anvil;

namespace {

std::string Arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (name == argv[i]) return argv[i + 1];
  }
  return fallback;
}

int Compare(const std::string& a, const std::string& b, double rtol) {
  const io::Safetensors x = io::load_safetensors(a), y = io::load_safetensors(b);
  if (x.tensors.size() != y.tensors.size()) {
    std::printf("different tensor counts: %zu and %zu\n", x.tensors.size(), y.tensors.size());
    return 1;
  }
  double worst = 0, worst_abs = 0;
  bool bitwise = true;
  std::string where;
  for (const auto& [name, t] : x.tensors) {
    const Tensor* u = y.find(name);
    if (u == nullptr) {
      std::printf("%s is missing from %s\n", name.c_str(), b.c_str());
      return 1;
    }
    const std::vector<double> p = t.to(kFloat64).reshape({-1}).to_vector<double>();
    const std::vector<double> q = u->to(kFloat64).reshape({-1}).to_vector<double>();
    double diff = 0, scale = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      diff = std::max(diff, std::abs(p[i] - q[i]));
      scale = std::max(scale, std::abs(q[i]));
      bitwise = bitwise && p[i] == q[i];
    }
    worst_abs = std::max(worst_abs, diff);
    // Relative to the tensor's largest magnitude (torch.testing's closeness per tensor, with
    // the tensor's scale: an element near zero is not held to a tighter absolute bound).
    const double rel = scale > 0 ? diff / scale : diff;
    if (rel > worst) {
      worst = rel;
      where = name;
    }
  }
  std::printf("max relative difference %.3g (in %s), max absolute %.3g, bitwise %s\n", worst, where.c_str(), worst_abs,
              bitwise ? "identical" : "different");
  return worst <= rtol ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "--compare") {
      return Compare(argv[2], argv[3], std::stod(Arg(argc, argv, "--rtol", "1e-6")));
    }
    const std::string optimizer = Arg(argc, argv, "--optimizer", "sgd");
    const int64_t steps = std::stoll(Arg(argc, argv, "--steps", "100"));
    const std::string out = Arg(argc, argv, "--out", "");
    const std::string checkpoint = Arg(argc, argv, "--checkpoint", "");
    const int64_t checkpoint_every = std::stoll(Arg(argc, argv, "--checkpoint-every", "0"));
    const int64_t delay_ms = std::stoll(Arg(argc, argv, "--step-delay-ms", "0"));
    const int64_t agreement_every = std::stoll(Arg(argc, argv, "--agreement-every", "100"));

    const bool distributed = distributed::RankEnvironment::present();
    distributed::RankEnvironment env;
    std::shared_ptr<distributed::ProcessGroup> group;
    if (distributed) {
      env = distributed::RankEnvironment::from_env();
      std::fprintf(stderr, "[rank %d] %s\n", env.rank, env.describe().c_str());
      group = distributed::init_process_group(env);
    }
    const int world = distributed ? env.world_size : 1;
    const int rank = distributed ? env.rank : 0;
    constexpr int64_t kGlobalBatch = 64;
    if (kGlobalBatch % world != 0) throw Error("the global batch of 64 must divide by the world size");

    // The same data on every rank: a fixed generator, not the rank's.
    manual_seed(1234);
    const int64_t n = 2048, n_val = 301, features = 32, classes = 4;
    const Tensor centers = randn({classes, features});
    auto make = [&](int64_t count) {
      const Tensor y = randint(0, classes, {count});
      const Tensor x = centers.index_select(0, y) + randn({count, features}) * 1.5;
      return std::make_shared<data::TensorDataset>(
          std::vector<std::pair<std::string, Tensor>>{{"input", x}, {"target", y}});
    };
    auto train_set = make(n);
    auto val_set = make(n_val);

    manual_seed(7);  // rank 0's initialisation wins anyway (DDP broadcasts it)
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(features, 64), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 64),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, classes)});
    std::shared_ptr<optim::Optimizer> opt;
    if (optimizer == "adamw") {
      opt = std::make_shared<optim::AdamW>(model->parameters(), optim::Options{{"lr", 3e-3}, {"weight_decay", 0.01}});
    } else {
      opt = std::make_shared<optim::SGD>(model->parameters(), optim::Options{{"lr", 0.05}, {"momentum", 0.9}});
    }

    data::DataLoaderOptions train_opts;
    train_opts.batch_size = kGlobalBatch / world;
    train_opts.seed = 5;
    train_opts.sampler = std::make_shared<data::DistributedSampler>(n, world, rank, /*shuffle=*/true, /*seed=*/5);
    data::DataLoaderOptions val_opts;
    val_opts.batch_size = 50;
    val_opts.sampler = std::make_shared<distributed::EvaluationShardSampler>(n_val, world, rank);
    data::DataLoader train_loader(train_set, train_opts);
    data::DataLoader val_loader(val_set, val_opts);

    train::TrainerOptions o;
    o.epochs = 1000;
    o.max_steps = steps;
    o.metric_interval = 10;
    o.checkpoint_path = checkpoint;
    o.checkpoint_every_steps = checkpoint_every;
    o.checkpoint_every_epoch = false;
    train::Trainer trainer(model, opt, o);
    if (group) {
      trainer.set_data_parallel(std::make_shared<distributed::DistributedDataParallel>(model, group), agreement_every);
    }
    if (!checkpoint.empty() && std::filesystem::exists(checkpoint)) {
      trainer.resume(checkpoint, train_loader);
      std::fprintf(stderr, "[rank %d] resumed at step %lld\n", rank, static_cast<long long>(trainer.step()));
    }
    trainer.set_callbacks({.on_step = [&](const train::StepMetrics& m) {
      if (rank == 0) {
        std::fprintf(stderr, "[rank 0] step %lld loss %.6f\n", static_cast<long long>(m.step), m.loss);
      }
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    }});
    trainer.fit(train_loader);
    const auto [val_loss, val_accuracy] = trainer.evaluate(val_loader);
    if (rank == 0) {
      std::printf("steps=%lld val_loss=%.9f val_accuracy=%.9f correct=%lld/%lld\n",
                  static_cast<long long>(trainer.step()), val_loss, val_accuracy.value_or(-1),
                  static_cast<long long>(std::llround(val_accuracy.value_or(0) * n_val)),
                  static_cast<long long>(n_val));
      if (!out.empty()) io::save_safetensors(out, model->state_dict().tensors);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_train_main: %s\n", e.what());
    return 1;
  }
}
