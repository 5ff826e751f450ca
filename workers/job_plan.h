// From a validated JobSpec to the objects that train it: datasets (with the validation
// split), the model (a preset sized from the data, or a JSON spec checked against it),
// optimizer, schedule, loss and Trainer options. Everything a job needs is decided here, so
// a worker only runs the plan; a bad combination (a model whose input does not match the
// data) fails here with a message naming both shapes.
//
// Thread-safety: make_job_plan is reentrant; a JobPlan belongs to the thread that runs it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/data.h"
#include "core/models/spec.h"
#include "core/optim/optimizer.h"
#include "core/optim/scheduler.h"
#include "core/train/trainer.h"
#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::workers {

struct PlanPaths {
  std::string data_root;      // absolute; the spec's dataset path is relative to it
  std::string datasets_dir;   // where built-in dataset files live (digits.csv.gz)
  std::string checkpoint;     // absolute path of this job's checkpoint file
  Device device = kCPU;       // where the model trains: moved there before its optimizer is built
  int64_t memory_budget = 0;  // bytes (workers/job_memory.h): checked before the model is built; 0 = no limit
  // A data-parallel rank's place: the spec's batch_size is the global batch, each rank loads
  // batch_size / world_size of its DistributedSampler shard and validates its evaluation shard.
  int world_size = 1, rank = 0;
};

struct JobPlan {
  std::shared_ptr<const data::Dataset> train_set, val_set;
  models::BuiltModel model;
  std::vector<std::string> labels;  // class names (empty for regression)
  std::shared_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<optim::LRScheduler> scheduler;  // may be null
  train::TrainerOptions options;
  train::LossFn loss;
  data::DataLoaderOptions train_loader, val_loader;
  int64_t total_steps = 0;  // expected optimizer steps
};

// A job's data alone: the dataset loaded and split into training and validation parts (by
// `seed`, as make_job_plan splits it).
struct JobData {
  std::shared_ptr<const data::Dataset> train_set, val_set;
  std::vector<std::string> labels;  // class names (empty for regression)
  int64_t num_classes = 0;          // 0: real-valued targets
  // The classes that label at least one sample, where the dataset says without reading every
  // sample (tables, image folders; the built-in sets have all theirs); -1 where unknown. With
  // one class a classifier learns nothing: training refuses it (make_job_plan), and names it
  // (`sole_class`, with where to look: `one_class_hint`).
  int64_t classes_present = -1;
  std::string sole_class, one_class_hint;
};
JobData make_job_data(const v1::DatasetSpec& dataset, const PlanPaths& paths, uint64_t seed);

// How a dataset spec's CSV/TSV file is read (its label_column; opened beneath `data_root`).
// Throws anvil::Error for a path that is not a .csv/.tsv[.gz] file.
data::CsvOptions csv_options(const v1::DatasetSpec& dataset, const std::string& data_root);

// What a submitted job's data can be checked for without reading it: a table's first lines
// have the label_column the spec names (data::read_csv_columns), and no label_column is given
// for a built-in dataset or an image folder. Throws anvil::Error naming the field, with
// the file's place (path:line) where the file is at fault.
void check_dataset_columns(const v1::DatasetSpec& dataset, const std::string& data_root);

// Called after each of the plan's costly phases, with what was done ("its data", "its
// model"); it may throw to stop the plan there (a dry run whose client left).
using PlanPhaseDone = std::function<void(std::string_view done)>;

// What a plan is for: training refuses data it cannot learn from (labels of one class); a
// quantization's calibration set may be anything the accuracy gate then judges.
enum class PlanPurpose { kTraining, kQuantization };

// Seeds the default generator with spec.seed first (model initialisation is reproducible);
// a dry run passes seed_generator = false so it cannot disturb a job training meanwhile.
JobPlan make_job_plan(const v1::JobSpec& spec, const PlanPaths& paths, bool seed_generator = true,
                      const PlanPhaseDone& phase_done = {}, PlanPurpose purpose = PlanPurpose::kTraining);

}  // namespace anvil::workers
