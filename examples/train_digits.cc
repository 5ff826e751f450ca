// Trains an MLP on the built-in digits dataset (1,797 8x8 handwritten digits) with the
// engine's data pipeline, modules and optimizer, printing loss, data-wait and accuracy per
// epoch. `make demo` runs it until the service exists.
//
//   train_digits [DATA_DIR]     (default: $ANVIL_DATA_DIR, else ./data; `make data` fetches it)
#include <chrono>
#include <cstdio>

#include "core/anvil.h"
#include "core/data/data.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"

using namespace anvil;

namespace {

double Accuracy(nn::Module& model, const std::shared_ptr<data::Dataset>& ds) {
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(ds, {.batch_size = 512});
  int64_t correct = 0;
  for (auto& b : loader) correct += (model(b["input"]).argmax(1) == b["target"]).sum().item<int64_t>();
  model.train();
  return 100.0 * static_cast<double>(correct) / static_cast<double>(ds->size());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    manual_seed(0);
    const std::string dir = argc > 1 ? argv[1] : data::default_data_dir();
    // Pixels are 0..16: scale them to [0, 1] as a dataset transform.
    auto digits = std::make_shared<data::MapDataset>(
        std::make_shared<data::Digits>(dir),
        std::make_shared<data::Lambda>([](const Tensor& x) { return x / 16.0; }, "Scale(1/16)"));
    auto split = data::random_split(digits, std::vector<double>{0.8, 0.2}, /*seed=*/0);
    std::printf("digits: %lld train / %lld test samples from %s\n", static_cast<long long>(split[0]->size()),
                static_cast<long long>(split[1]->size()), data::find_digits(dir).c_str());

    nn::Sequential model{std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(),
                         std::make_shared<nn::Linear>(128, 128), std::make_shared<nn::ReLU>(),
                         std::make_shared<nn::Linear>(128, 10)};
    std::printf("%s", model.summary().c_str());
    optim::Adam opt(model.parameters(), {{"lr", 2e-3}});
    data::DataLoader loader(split[0], {.batch_size = 64, .shuffle = true, .num_workers = 2, .seed = 1});

    const auto start = std::chrono::steady_clock::now();
    for (int epoch = 1; epoch <= 40; ++epoch) {
      double loss_sum = 0;
      int64_t batches = 0;
      for (auto& batch : loader) {
        opt.zero_grad();
        Tensor loss = nn::F::cross_entropy(model(batch["input"]), batch["target"]);
        loss.backward();
        opt.step();
        loss_sum += loss.item<double>();
        ++batches;
      }
      if (epoch % 10 == 0 || epoch == 1) {
        const auto s = loader.stats();
        std::printf("epoch %2d  loss %.4f  test accuracy %.2f %%  (%.0f batches/s, data-wait %.1f %%)\n", epoch,
                    loss_sum / static_cast<double>(batches), Accuracy(model, split[1]), s.batches_per_second(),
                    100.0 * s.wait_ratio());
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("trained in %.2f s; final test accuracy %.2f %%\n", secs, Accuracy(model, split[1]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_digits: %s\n", e.what());
    return 1;
  }
  return 0;
}
