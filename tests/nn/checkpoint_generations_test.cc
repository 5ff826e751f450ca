// Checkpoint generations and crash consistency: the last `keep` checkpoints are kept; a
// diverged state is never checkpointed; and a process killed at any point of the write
// sequence (after the rotation, after the data, after the fsync, after the rename) leaves at
// least one generation that verifies, holding either the old state or the new one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "core/anvil.h"
#include "core/data/data.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/train/checkpoint.h"
#include "core/train/trainer.h"
#include "core/util/fault_point.h"

extern char** environ;

namespace anvil::train {
namespace {

namespace fs = std::filesystem;

// A small run whose first weight is set by hand, so each checkpoint's content is known.
struct SmallRun {
  std::shared_ptr<nn::Linear> model = std::make_shared<nn::Linear>(3, 2);
  std::shared_ptr<optim::Adam> opt = std::make_shared<optim::Adam>(model->parameters(), optim::Options{{"lr", 1e-2}});
  std::shared_ptr<data::DataLoader> loader;
  std::unique_ptr<Trainer> trainer;

  explicit SmallRun(const std::string& path) {
    auto ds = std::make_shared<data::TensorDataset>(data::make_blobs(20, 2, 3, 1.0, 1));
    loader = std::make_shared<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 4});
    TrainerOptions o;
    o.checkpoint_path = path;
    o.checkpoint_keep = 2;
    trainer = std::make_unique<Trainer>(model, opt, o,
                                        [](const Tensor& y, const Tensor& t) { return nn::F::cross_entropy(y, t); });
  }
  void Mark(float v) {
    NoGradGuard no_grad;
    model->weight.fill_(v);
  }
  void Save(float v) {
    Mark(v);
    trainer->checkpoint(*loader);
  }
};

// The first weight a checkpoint holds, or NaN when it does not verify.
float Holds(const std::string& path) {
  SmallRun r("");
  try {
    load_checkpoint(path, *r.model, *r.opt);
  } catch (const Error&) {
    return std::nanf("");
  }
  return r.model->weight.flatten()[0].item<float>();
}

std::string Dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("anvil-gen-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

TEST(CheckpointGenerations, TheLastTwoAreKeptNewestFirst) {
  const std::string path = Dir("keep") + "/checkpoint.safetensors";
  SmallRun r(path);
  r.Save(1);
  r.Save(2);
  r.Save(3);
  EXPECT_EQ(existing_checkpoints(path, 2), (std::vector<std::string>{path, checkpoint_generation(path, 1)}));
  EXPECT_EQ(Holds(path), 3);
  EXPECT_EQ(Holds(checkpoint_generation(path, 1)), 2);
  EXPECT_FALSE(fs::exists(checkpoint_generation(path, 2)));
  EXPECT_EQ(fs::path(checkpoint_generation(path, 1)).filename(), "checkpoint.1.safetensors");
}

TEST(CheckpointGenerations, ANonFiniteStateIsNotCheckpointed) {
  const std::string path = Dir("finite") + "/checkpoint.safetensors";
  SmallRun r(path);
  r.Save(1);
  r.Save(std::numeric_limits<float>::infinity());
  r.Save(std::nanf(""));
  EXPECT_EQ(Holds(path), 1);  // the last all-finite state stays the newest
  EXPECT_FALSE(fs::exists(checkpoint_generation(path, 1)));
}

// The child half: writes generation "1", then, with the fault point armed, "2".
TEST(CheckpointGenerations, CrashChild) {
  const char* dir = std::getenv("ANVIL_CRASH_CHILD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "run by CrashAtEveryStepLeavesAVerifiedGeneration";
  const std::string path = std::string(dir) + "/checkpoint.safetensors";
  const std::string point = std::getenv("ANVIL_CRASH_CHILD_POINT");
  SmallRun r(path);
  r.Save(1);
  set_fault_point(point);
  r.Save(2);
  ::_exit(0);  // the point was not reached
}

TEST(CheckpointGenerations, CrashAtEveryStepLeavesAVerifiedGeneration) {
  for (const char* point : {"checkpoint:rotated", "atomic_file:written", "atomic_file:synced", "atomic_file:renamed"}) {
    const std::string dir = Dir(std::string("crash-") + (std::strchr(point, ':') + 1));
    const std::string filter = "--gtest_filter=CheckpointGenerations.CrashChild";
    const std::string env_dir = "ANVIL_CRASH_CHILD_DIR=" + dir,
                      env_point = std::string("ANVIL_CRASH_CHILD_POINT=") + point;
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    env_strings.push_back(env_dir);
    env_strings.push_back(env_point);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string self = fs::read_symlink("/proc/self/exe").string();
    std::vector<char*> argv{self.data(), const_cast<char*>(filter.c_str()), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << point;
    EXPECT_EQ(WEXITSTATUS(status), kFaultPointExitCode) << point << ": the fault point was not reached";
    const std::string path = dir + "/checkpoint.safetensors";
    const std::vector<std::string> kept = existing_checkpoints(path, 2);
    ASSERT_FALSE(kept.empty()) << point;
    // The newest file present verifies, and holds the old state or the new one.
    const float newest = Holds(kept[0]);
    EXPECT_TRUE(newest == 1 || newest == 2) << point << ": " << kept[0] << " holds " << newest;
    // Before the rename the new state is not visible yet; after it, it is.
    EXPECT_EQ(newest, std::string(point) == "atomic_file:renamed" ? 2 : 1) << point;
  }
}

}  // namespace
}  // namespace anvil::train
