// Trains a LeNet-style CNN on the built-in digits dataset (1,797 8x8 handwritten digits) with
// the engine's data pipeline, modules, optimizer, schedule and Trainer, printing metrics as
// they come and the final test accuracy. `make demo` runs it until the service exists.
//
//   train_digits [DATA_DIR]     (default: $ANVIL_DATA_DIR, else ./data; `make data` fetches it)
#include <chrono>
#include <cstdio>

#include "core/anvil.h"
#include "core/data/data.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/optim/scheduler.h"
#include "core/train/trainer.h"

using namespace anvil;

int main(int argc, char** argv) {
  try {
    manual_seed(0);
    const std::string dir = argc > 1 ? argv[1] : data::default_data_dir();
    // Pixels are 0..16 in [1, 8, 8] images: scale them to [0, 1] as a dataset transform.
    auto digits = std::make_shared<data::MapDataset>(
        std::make_shared<data::Digits>(dir, data::DigitsOptions{.as_image = true}),
        std::make_shared<data::Lambda>([](const Tensor& x) { return x / 16.0; }, "Scale(1/16)"));
    auto split = data::random_split(digits, std::vector<double>{0.8, 0.2}, /*seed=*/0);
    std::printf("digits: %lld train / %lld test images from %s\n", static_cast<long long>(split[0]->size()),
                static_cast<long long>(split[1]->size()), data::find_digits(dir).c_str());

    using nn::ConvOptions;
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 32, std::array<int64_t, 2>{3, 3}, ConvOptions{.same = true}),
        std::make_shared<nn::BatchNorm2d>(32), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::MaxPool2d>(std::array<int64_t, 2>{2, 2}),
        std::make_shared<nn::Conv2d>(32, 64, std::array<int64_t, 2>{3, 3}, ConvOptions{.same = true}),
        std::make_shared<nn::BatchNorm2d>(64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::MaxPool2d>(std::array<int64_t, 2>{2, 2}), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(64 * 2 * 2, 128), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Dropout>(0.25), std::make_shared<nn::Linear>(128, 10)});
    std::printf("%s", model->summary().c_str());

    const int64_t epochs = 15;
    data::DataLoader train(split[0], {.batch_size = 64, .shuffle = true, .num_workers = 2, .seed = 1});
    data::DataLoader test(split[1], {.batch_size = 256});
    auto opt = std::make_shared<optim::AdamW>(model->parameters(), optim::Options{{"lr", 3e-3}});
    train::Trainer trainer(model, opt,
                           {.epochs = epochs,
                            .metric_interval = 10,
                            .scheduler_per_step = true,
                            .checkpoint_path = dir + "/digits-cnn.ckpt"});
    trainer.set_scheduler(std::make_shared<optim::OneCycleLR>(*opt, 3e-3, epochs * train.size()));
    trainer.set_callbacks({
        .on_step =
            [](const train::StepMetrics& m) {
              if (m.step % 60 == 0) {
                std::printf("  step %4lld  loss %.4f  grad-norm %.3f  lr %.2e  %6.0f samples/s  data-wait %4.1f %%\n",
                            static_cast<long long>(m.step), m.loss, m.grad_norm, m.lr, m.samples_per_second,
                            100.0 * m.data_wait_ratio);
              }
            },
        .on_epoch =
            [](const train::EpochMetrics& m) {
              std::printf("epoch %2lld  train loss %.4f  test loss %.4f  test accuracy %.2f %%\n",
                          static_cast<long long>(m.epoch + 1), m.train_loss, m.val_loss.value_or(0),
                          100.0 * m.val_accuracy.value_or(0));
            },
    });
    const auto start = std::chrono::steady_clock::now();
    const train::TrainResult r = trainer.fit(train, &test);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto [loss, acc] = trainer.evaluate(test);
    std::printf("trained %lld steps in %.1f s; test accuracy %.2f %% (loss %.4f); checkpoint %s/digits-cnn.ckpt\n",
                static_cast<long long>(r.steps), secs, 100.0 * acc.value_or(0), loss, dir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_digits: %s\n", e.what());
    return 1;
  }
  return 0;
}
