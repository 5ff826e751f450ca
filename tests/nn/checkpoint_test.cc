// Training checkpoints: a resumed run reproduces the uninterrupted run's losses bitwise;
// corrupt, truncated and mismatched files are reported and nothing is half-loaded.
#include "core/train/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/anvil.h"
#include "core/data/data.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/optim/scheduler.h"
#include "tests/core/test_util.h"

namespace anvil::train {
namespace {

using test::ErrorOf;
using ::testing::HasSubstr;

std::shared_ptr<nn::Sequential> Model() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.2),
      std::make_shared<nn::Linear>(32, 3)});
}

// Everything a run owns.
struct TrainingRun {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::CosineAnnealingLR> sched;
  std::unique_ptr<data::DataLoader> loader;
  int64_t step = 0;

  explicit TrainingRun(uint64_t init_seed) {
    manual_seed(init_seed);
    model = Model();
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::Options{{"lr", 1e-2}, {"weight_decay", 1e-4}});
    sched = std::make_unique<optim::CosineAnnealingLR>(*opt, 40);
    auto ds = std::make_shared<data::TensorDataset>(data::make_blobs(200, 3, 4, 1.5, 7));
    loader = std::make_unique<data::DataLoader>(
        ds, data::DataLoaderOptions{.batch_size = 16, .shuffle = true, .num_workers = 2, .seed = 5});
  }
  // One optimizer step; starts the next epoch when one ends.
  double Step() {
    std::optional<data::Example> b = loader->next();
    if (!b) b = loader->next();
    opt->zero_grad();
    Tensor loss = nn::F::cross_entropy((*model)((*b)["input"]), (*b)["target"]);
    loss.backward();
    opt->step();
    sched->step();
    ++step;
    return loss.item<double>();
  }
  TrainingState State() const {
    return {
        step,        loader->position(), 5, default_generator().get_state(), sched->last_step(), {{step, "loss", 0.5}},
        {{"k", "v"}}};
  }
};

std::string Path(const std::string& name) { return ::testing::TempDir() + "/" + name; }

TEST(CheckpointTest, ResumedRunMatchesUninterruptedRunBitwise) {
  std::vector<double> reference;
  {
    TrainingRun r(1);
    for (int i = 0; i < 30; ++i) reference.push_back(r.Step());
  }
  const std::string path = Path("resume.ckpt");
  std::vector<double> resumed;
  {
    TrainingRun r(1);
    for (int i = 0; i < 17; ++i) resumed.push_back(r.Step());  // 17: mid-epoch (13 batches per epoch)
    save_checkpoint(path, *r.model, *r.opt, r.State());
    for (int i = 0; i < 5; ++i) r.Step();  // the run goes on and dies; its later state must not matter
  }
  TrainingRun r(999);  // a fresh process: different initial weights and generator state
  const TrainingState s = load_checkpoint(path, *r.model, *r.opt);
  r.loader->set_position(s.loader);
  r.sched->set_step(s.scheduler_step);
  r.step = s.step;
  EXPECT_EQ(s.step, 17);
  EXPECT_EQ(s.history.size(), 1u);
  EXPECT_EQ(s.extra.at("k"), "v");
  while (resumed.size() < reference.size()) resumed.push_back(r.Step());
  for (size_t i = 0; i < reference.size(); ++i) EXPECT_EQ(resumed[i], reference[i]) << "step " << i;
}

TEST(CheckpointTest, CorruptOrTruncatedFilesAreReportedAndNothingIsLoaded) {
  TrainingRun a(1);
  a.Step();
  const std::string path = Path("corrupt.ckpt");
  save_checkpoint(path, *a.model, *a.opt, a.State());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  TrainingRun b(2);
  const Tensor before = b.model->parameters()[0].clone();
  std::string flipped = bytes;
  flipped[flipped.size() - 10] ^= 0x40;  // one bit in the last tensor's data
  std::ofstream(Path("flipped.ckpt"), std::ios::binary) << flipped;
  EXPECT_THAT(ErrorOf([&] { load_checkpoint(Path("flipped.ckpt"), *b.model, *b.opt); }),
              HasSubstr("checksum mismatch"));
  std::ofstream(Path("short.ckpt"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_THAT(ErrorOf([&] { load_checkpoint(Path("short.ckpt"), *b.model, *b.opt); }), HasSubstr("truncated"));
  EXPECT_TRUE(equal(b.model->parameters()[0], before));
  // A checkpoint of another architecture: the key and both shapes are named.
  nn::Sequential other{std::make_shared<nn::Linear>(4, 16), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Dropout>(0.2), std::make_shared<nn::Linear>(16, 3)};
  EXPECT_THAT(ErrorOf([&] { load_model_from_checkpoint(path, other); }),
              HasSubstr("size mismatch for '0.weight': the checkpoint has [32, 4], the module has [16, 4]"));
  // The same file loads into a matching model.
  load_model_from_checkpoint(path, *b.model);
  EXPECT_TRUE(equal(b.model->parameters()[0], a.model->parameters()[0]));
}

TEST(CheckpointTest, ARefusedLoadChangesNeitherModelNorOptimizer) {
  // Same parameters (so the optimizer state fits) but an extra buffer the file lacks.
  manual_seed(0);
  nn::Sequential a{std::make_shared<nn::Linear>(4, 3)};
  optim::Adam opt_a(a.parameters());
  a(randn({2, 4})).sum().backward();
  opt_a.step();
  const std::string path = Path("mismatch.ckpt");
  save_checkpoint(path, a, opt_a, {});
  nn::Sequential b{std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3, 1e-5, 0.1, false)};
  optim::Adam opt_b(b.parameters());
  EXPECT_THAT(ErrorOf([&] { load_checkpoint(path, b, opt_b); }), HasSubstr("missing keys: '1.running_mean'"));
  EXPECT_TRUE(opt_b.state_dict().params.empty());  // the file's Adam moments were not kept
  // The other way round: the model fits but the optimizer (two groups, not one) does not.
  nn::Sequential c{std::make_shared<nn::Linear>(4, 3)};
  auto pc = c.parameters();
  optim::Adam opt_c(std::vector<optim::ParamGroup>{{{pc[0]}, {}}, {{pc[1]}, {}}}, {});
  const Tensor before = pc[0].detach().clone();
  EXPECT_THAT(ErrorOf([&] { load_checkpoint(path, c, opt_c); }), HasSubstr("parameter groups"));
  EXPECT_TRUE(equal(c.parameters()[0], before));  // the model was not loaded either
}

}  // namespace
}  // namespace anvil::train
