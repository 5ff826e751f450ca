#include "workers/job_plan.h"

#include <filesystem>
#include <set>

#include "core/amp/autocast.h"
#include "core/distributed/samplers.h"
#include "core/nn/functional.h"
#include "core/ops/functions.h"
#include "core/util/error.h"
#include "workers/job_memory.h"

namespace anvil::workers {
namespace {

namespace fs = std::filesystem;

struct Data {
  std::shared_ptr<const data::Dataset> all;
  std::vector<std::string> labels;
  int64_t num_classes = 0;       // 0: regression
  int64_t classes_present = -1;  // -1: unknown
  std::string sole_class;        // the class, when classes_present is 1
  std::string one_class_hint;    // where to look then
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A label column means something for a table only: elsewhere it is a mistake to report, not
// a field to ignore.
void RefuseLabelColumnOutsideTables(const v1::DatasetSpec& d, const std::string& data_root) {
  if (d.label_column().empty()) return;
  ANVIL_CHECK(d.name().empty(), "dataset.label_column: applies to CSV/TSV files; \"", d.name(),
              "\" is a built-in dataset with its own labels");
  ANVIL_CHECK(!fs::is_directory(fs::path(data_root) / d.path()), "dataset.label_column: applies to CSV/TSV files; \"",
              d.path(), "\" is an image folder, whose classes are its subfolders");
}

Data LoadData(const v1::DatasetSpec& d, const PlanPaths& paths, uint64_t seed) {
  Data out;
  RefuseLabelColumnOutsideTables(d, paths.data_root);
  if (d.name() == "digits") {
    auto digits = std::make_shared<data::Digits>(paths.datasets_dir, data::DigitsOptions{.as_image = true});
    out.all = std::make_shared<data::MapDataset>(
        digits, std::make_shared<data::Lambda>([](const Tensor& x) { return x / 16.0; }, "Scale(1/16)"));
    out.num_classes = data::Digits::kNumClasses;
    for (int k = 0; k < 10; ++k) out.labels.push_back(std::to_string(k));
    return out;
  }
  if (d.name() == "blobs" || d.name() == "spirals") {
    const int64_t classes = d.name() == "blobs" ? 4 : 3;
    auto set = d.name() == "blobs" ? data::make_blobs(2000, classes, 2, 1.0, seed)
                                   : data::make_spirals(1500, classes, 0.05, seed);
    out.all = std::make_shared<data::TensorDataset>(std::move(set));
    out.num_classes = classes;
    for (int64_t k = 0; k < classes; ++k) out.labels.push_back("class " + std::to_string(k));
    return out;
  }
  const std::string path = (fs::path(paths.data_root) / d.path()).string();
  if (fs::is_directory(path)) {
    data::ImageFolderOptions image_options;
    image_options.confine_to = paths.data_root;  // checked again at every open, not only at submit
    auto images = std::make_shared<data::ImageFolder>(path, image_options);
    out.labels = images->classes();
    out.num_classes = static_cast<int64_t>(out.labels.size());
    out.classes_present = out.num_classes;
    if (out.num_classes == 1) {
      out.sole_class = "\"" + out.labels[0] + "\"";
      out.one_class_hint = "each class is a subfolder of images, and this folder has one";
    }
    out.all = std::make_shared<data::MapDataset>(images, std::make_shared<data::ToTensor>());
    return out;
  }
  auto csv = std::make_shared<data::CsvDataset>(path, csv_options(d, paths.data_root));
  if (csv->is_classification()) {
    out.num_classes = csv->num_classes();
    out.labels = csv->classes();
    if (out.labels.empty()) {
      for (int64_t k = 0; k < out.num_classes; ++k) out.labels.push_back(std::to_string(k));
    }
    const std::vector<int64_t> targets = csv->targets().to_vector<int64_t>();
    const std::set<int64_t> present(targets.begin(), targets.end());
    out.classes_present = static_cast<int64_t>(present.size());
    if (present.size() == 1) {
      out.sole_class = "\"" + out.labels[static_cast<size_t>(*present.begin())] + "\"";
      out.one_class_hint =
          "check the label column \"" + d.label_column() + "\", or whether the file holds only part of the data";
    }
  }
  out.all = csv;
  return out;
}

std::shared_ptr<optim::Optimizer> MakeOptimizer(const v1::OptimizerSpec& o, std::vector<Tensor> params) {
  optim::Options opts{{"lr", o.lr()}, {"weight_decay", o.weight_decay()}};
  if (o.name() == "sgd") {
    opts["momentum"] = o.momentum();
    opts["nesterov"] = o.nesterov() ? 1.0 : 0.0;
    return std::make_shared<optim::SGD>(std::move(params), opts);
  }
  if (o.name() == "rmsprop") {
    opts["momentum"] = o.momentum();
    if (o.eps() > 0) opts["eps"] = o.eps();
    return std::make_shared<optim::RMSprop>(std::move(params), opts);
  }
  if (o.betas_size() == 2) {
    opts["beta1"] = o.betas(0);
    opts["beta2"] = o.betas(1);
  }
  if (o.eps() > 0) opts["eps"] = o.eps();
  if (o.name() == "adam") return std::make_shared<optim::Adam>(std::move(params), opts);
  return std::make_shared<optim::AdamW>(std::move(params), opts);
}

}  // namespace

JobData make_job_data(const v1::DatasetSpec& dataset, const PlanPaths& paths, uint64_t seed) {
  Data d = LoadData(dataset, paths, seed);
  ANVIL_CHECK(d.all->size() >= 2, "dataset: expected at least 2 samples, got ", d.all->size());
  const double vf = dataset.validation_fraction();
  const int64_t n_val = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(d.all->size()) * vf));
  auto parts = data::random_split(d.all, std::vector<int64_t>{d.all->size() - n_val, n_val}, seed);
  JobData out;
  out.train_set = parts[0];
  out.val_set = parts[1];
  out.labels = d.labels;
  out.num_classes = d.num_classes;
  out.classes_present = d.classes_present;
  out.sole_class = d.sole_class;
  out.one_class_hint = d.one_class_hint;
  return out;
}

JobPlan make_job_plan(const v1::JobSpec& spec, const PlanPaths& paths, bool seed_generator,
                      const PlanPhaseDone& phase_done, PlanPurpose purpose) {
  const auto done = [&phase_done](std::string_view what) {
    if (phase_done) phase_done(what);
  };
  if (seed_generator) manual_seed(spec.seed());
  JobPlan plan;
  const JobData d = make_job_data(spec.dataset(), paths, spec.seed());
  // A quantization's calibration set may well be one class (the gate then says what that
  // costs); a training set may not.
  ANVIL_CHECK(purpose != PlanPurpose::kTraining || d.num_classes == 0 || d.classes_present != 1,
              "dataset: every sample is labelled ", d.sole_class,
              ": a classifier needs at least 2 classes to learn anything (", d.one_class_hint, ")");
  done("its data");
  plan.train_set = d.train_set;
  plan.val_set = d.val_set;
  plan.labels = d.labels;

  const data::Example sample = plan.train_set->get(0);
  const Tensor& x0 = sample["input"];
  const bool classification = d.num_classes > 0;
  ANVIL_CHECK(spec.loss() != "cross_entropy" || classification,
              "loss: cross_entropy needs class labels, but the dataset's targets are real numbers (use \"mse\")");
  const int64_t outputs = classification ? d.num_classes : 1;
  const std::string json = spec.model_json().empty()
                               ? models::preset_spec(spec.model_preset(), x0.sizes(), std::max<int64_t>(outputs, 2))
                               : spec.model_json();
  // Priced before it is built: a model that cannot fit fails here with the estimate, not later
  // with the OOM killer.
  check_job_memory(models::estimate_model(json), spec, paths.memory_budget);
  plan.model = models::build_model(json);
  ANVIL_CHECK(plan.model.input_shape == x0.sizes(), "model: its input shape ", shape_str(plan.model.input_shape),
              " does not match the dataset's samples ", shape_str(x0.sizes()));
  // Cross-entropy needs a logit per class: a smaller head would fail at the first batch whose
  // target is past it, with the loss's bounds error instead of this.
  if (classification && spec.loss() == "cross_entropy") {
    const IntArray& out = plan.model.output_shape;
    ANVIL_CHECK(out.size() == 1 && out[0] >= d.num_classes, "model: its output ", shape_str(out),
                " per sample cannot score the dataset's ", d.num_classes, " classes (cross_entropy needs [",
                d.num_classes, "]: a last linear layer with out_features ", d.num_classes, ")");
  }
  done("its model");

  // On the training device before the optimizer takes the parameters (to() replaces them).
  if (paths.device != kCPU) plan.model.module->to(paths.device);
  plan.optimizer = MakeOptimizer(spec.optimizer(), plan.model.module->parameters());
  const int world = std::max(paths.world_size, 1);
  ANVIL_CHECK(spec.batch_size() % world == 0, "batch_size: the global batch ", spec.batch_size(),
              " must divide by world_size ", world, " (every rank loads an equal share)");
  const int64_t rank_batch = spec.batch_size() / world;
  // Each rank's shard: ceil(n / world) samples (DistributedSampler pads with repeats), so every
  // rank runs the same number of steps.
  const int64_t shard = (plan.train_set->size() + world - 1) / world;
  const int64_t batches = (shard + rank_batch - 1) / rank_batch;
  const int64_t per_epoch = (batches + spec.accumulation_steps() - 1) / spec.accumulation_steps();
  plan.total_steps = per_epoch * spec.epochs();
  if (spec.max_steps() > 0) plan.total_steps = std::min(plan.total_steps, spec.max_steps());

  const v1::ScheduleSpec& s = spec.schedule();
  train::TrainerOptions& o = plan.options;
  if (s.name() == "step") {
    plan.scheduler = std::make_shared<optim::StepLR>(*plan.optimizer, s.step_size(), s.gamma());
  } else if (s.name() == "cosine") {
    plan.scheduler = std::make_shared<optim::CosineAnnealingLR>(*plan.optimizer, plan.total_steps, s.min_lr());
    o.scheduler_per_step = true;
  } else if (s.name() == "onecycle") {
    const double max_lr = s.max_lr() > 0 ? s.max_lr() : spec.optimizer().lr();
    optim::OneCycleOptions oc;
    oc.cycle_momentum = s.has_cycle_momentum() ? s.cycle_momentum() : true;
    plan.scheduler = std::make_shared<optim::OneCycleLR>(*plan.optimizer, max_lr, plan.total_steps, oc);
    o.scheduler_per_step = true;
  } else if (s.name() == "warmup_cosine") {
    plan.scheduler =
        std::make_shared<optim::WarmupCosineLR>(*plan.optimizer, s.warmup_steps(), plan.total_steps, s.min_lr());
    o.scheduler_per_step = true;
  }

  o.epochs = spec.epochs();
  o.max_steps = spec.max_steps() > 0 ? spec.max_steps() : -1;
  o.accumulation_steps = spec.accumulation_steps();
  o.clip_grad_norm = spec.clip_grad_norm();
  // Mixed precision: autocast on the job's device; fp16 brings loss scaling (TrainerOptions).
  o.precision = autocast::precision_dtype(spec.precision());
  o.amp_anomaly = spec.amp_anomaly();
  o.metric_interval = spec.metric_interval();
  if (!spec.early_stopping().monitor().empty()) o.monitor = spec.early_stopping().monitor();
  o.patience = spec.early_stopping().patience() > 0 ? spec.early_stopping().patience() : -1;
  o.min_delta = spec.early_stopping().min_delta();
  // The doctor's on_overfitting "stop" restores the best epoch's weights: they are kept.
  o.track_best_weights = spec.doctor().on_overfitting() == "stop";
  o.checkpoint_path = paths.checkpoint;
  o.checkpoint_every_steps = spec.checkpoint().every_steps();
  o.checkpoint_every_epoch = true;

  if (spec.loss() == "mse") {
    plan.loss = [](const Tensor& out, const Tensor& target) {
      // In float32 under mixed precision too (PyTorch's autocast runs mse_loss in float32).
      const Tensor o = out.dtype() == kBFloat16 || out.dtype() == kFloat16 ? out.to(kFloat32) : out;
      return nn::functional::mse_loss(o.reshape({o.size(0), -1}).squeeze(-1), target.to(o.dtype()));
    };
  } else {
    plan.loss = [](const Tensor& out, const Tensor& target) { return nn::functional::cross_entropy(out, target); };
  }
  // On a GPU, batches come in page-locked memory so their copies never stall the host.
  const bool pin = paths.device.is_cuda();
  plan.train_loader = {.batch_size = spec.batch_size(),
                       .shuffle = true,
                       .num_workers = static_cast<int>(spec.loader_workers()),
                       .pin_memory = pin,
                       .seed = spec.seed() + 1};
  plan.val_loader = {.batch_size = 256, .pin_memory = pin};
  if (world > 1) {
    plan.train_loader.batch_size = rank_batch;
    plan.train_loader.shuffle = false;
    plan.train_loader.sampler = std::make_shared<data::DistributedSampler>(plan.train_set->size(), world, paths.rank,
                                                                           /*shuffle=*/true, /*seed=*/spec.seed() + 1);
    plan.val_loader.sampler =
        std::make_shared<distributed::EvaluationShardSampler>(plan.val_set->size(), world, paths.rank);
  }
  return plan;
}

data::CsvOptions csv_options(const v1::DatasetSpec& d, const std::string& data_root) {
  const std::string path = (fs::path(data_root) / d.path()).string();
  ANVIL_CHECK(
      EndsWith(path, ".csv") || EndsWith(path, ".tsv") || EndsWith(path, ".csv.gz") || EndsWith(path, ".tsv.gz"),
      "dataset.path: expected a .csv/.tsv file (optionally .gz) or an image folder, got \"", d.path(), "\"");
  data::CsvOptions options;
  options.confine_to = data_root;
  if (!d.label_column().empty()) {
    const std::string& c = d.label_column();
    const bool numeric = c.find_first_not_of("-0123456789") == std::string::npos;
    if (numeric) {
      options.label_column = static_cast<int64_t>(std::stoll(c));
    } else {
      options.label_column = c;
    }
  }
  return options;
}

void check_dataset_columns(const v1::DatasetSpec& d, const std::string& data_root) {
  RefuseLabelColumnOutsideTables(d, data_root);
  if (!d.name().empty() || fs::is_directory(fs::path(data_root) / d.path())) return;
  data::read_csv_columns((fs::path(data_root) / d.path()).string(), csv_options(d, data_root));
}

}  // namespace anvil::workers
