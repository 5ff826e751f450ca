// Training checkpoints: everything a run needs to continue as if it had never stopped, in one
// safetensors file written atomically (temporary file, fsync, rename, fsync of the folder).
//
//   model tensors       "model/<state_dict key>" (aliases of shared modules in the metadata)
//   best weights        "best/<state_dict key>": early stopping's best epoch (restore_best_weights)
//   optimizer buffers   "optim/<parameter index>/<buffer>" (momentum, Adam moments, ...)
//   everything else     metadata "anvil.state": JSON with the step, the optimizer's groups
//                       and per-parameter step counts, the scheduler step, the engine's
//                       random generator, the loader position and seed, the metric history,
//                       early stopping's best value (IEEE bits) and bad-epoch count
//   integrity           metadata "anvil.crc32": CRC-32 of the tensor data and the state JSON
//
// Loading checks the format, the checksum, and every key and shape against the live model
// and optimizer BEFORE changing either: a corrupt, truncated or mismatched file is reported
// and nothing is half-loaded. With the same seed and thread count, a resumed CPU run
// reproduces the uninterrupted run's losses bitwise.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/data/dataloader.h"
#include "core/nn/module.h"
#include "core/optim/optimizer.h"
#include "core/train/metric_history.h"

namespace anvil::train {

// The non-tensor state of a run.
struct TrainingState {
  int64_t step = 0;                          // optimizer steps taken
  data::LoaderPosition loader;               // the next batch to train on
  uint64_t loader_seed = 0;                  // must match the loader of the resumed run
  std::pair<uint64_t, uint64_t> rng{0, 0};   // the default generator's (seed, offset)
  int64_t scheduler_step = -1;               // -1: no scheduler
  std::vector<MetricPoint> history;          // a MetricHistory's sample ...
  std::map<std::string, std::string> extra;  // caller-defined (e.g. best metric so far)
  int64_t history_stride = 1;                // ... with its stride and pending groups
  int64_t history_pending = 0;
  // Early stopping: the best monitored value so far, epochs since it, and the weights it had
  // (tensors "best/<key>"; empty unless restore_best_weights).
  std::optional<double> best_metric;
  int64_t bad_epochs = 0;
  nn::StateDict best_weights;
};

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const TrainingState& state);

// Restores model and optimizer in place and returns the state; also restores the default
// generator. The caller applies state.loader (DataLoader::set_position) and
// state.scheduler_step (LRScheduler::set_step).
TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer);

// Only the model's tensors (e.g. to serve a trained model), with the same checks.
void load_model_from_checkpoint(const std::string& path, nn::Module& model);

// Generations: the newest checkpoint is `path`, the one before it `path` with ".1" before the
// extension ("checkpoint.1.safetensors"), then ".2"... `keep` of them in all.
std::string checkpoint_generation(const std::string& path, int generation);
// Before a new checkpoint is written at `path`: generation g becomes g + 1 (renames, each
// atomic), the oldest falls off. A crash in between leaves every kept file whole.
void rotate_checkpoints(const std::string& path, int keep);
// The generations that exist, newest first.
std::vector<std::string> existing_checkpoints(const std::string& path, int keep);

// Whether every tensor of the model and the optimizer's state is finite (a checkpoint of a
// run that diverged would resume into NaN).
bool all_finite(const nn::Module& model, const optim::Optimizer& optimizer);

}  // namespace anvil::train
