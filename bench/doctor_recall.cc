// The training doctor's recall and false positives, measured on real runs: each fault the
// pitfalls guide names, provoked on the digits recipe, beside its healthy twin, over several
// seeds; then the built-in presets at their default recipes (the false positives a user would
// meet). Every run goes the service's way: the spec validated with its defaults
// (server::validate_job_spec), the plan built by workers::make_job_plan, the first batch
// checked and the production callbacks (workers::event_callbacks) feeding the doctor. A fault
// the spec cannot express (a sigmoid before BCE-with-logits, a dead-ReLU init, a host read in a
// custom model) is applied to the plan, as an engine user would write it.
//
//   anvil_doctor_recall DATASETS_DIR [SEEDS]     (DATASETS_DIR holds digits.csv.gz: make data)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/anvil.h"
#include "core/backend/cpu/kernel_info.h"
#include "core/nn/functional.h"
#include "core/nn/nn.h"
#include "core/train/doctor.h"
#include "server/job_spec.h"
#include "workers/job_plan.h"
#include "workers/job_steps.h"

namespace {

using namespace anvil;

// A model whose forward branches on a device value: one host read per step.
struct ReadsTheHost : nn::Module {
  std::shared_ptr<nn::Module> inner;
  bool reads;
  ReadsTheHost(std::shared_ptr<nn::Module> m, bool r) : nn::Module("ReadsTheHost"), reads(r) {
    inner = register_module("inner", std::move(m));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor y = inner->forward(x);
    if (reads && y.abs().max().item<double>() > 1e6) return y / 2.0;
    return y;
  }
};

// A model with an unbounded cache: every training forward keeps 256 KiB (its batch, widened
// sixteenfold, as a feature cache would hold it) that nothing frees.
struct KeepsACache : nn::Module {
  std::shared_ptr<nn::Module> inner;
  bool keeps;
  std::vector<Tensor> kept;
  KeepsACache(std::shared_ptr<nn::Module> m, bool k) : nn::Module("KeepsACache"), keeps(k) {
    inner = register_module("inner", std::move(m));
  }
  Tensor forward(const Tensor& x) override {
    if (keeps && is_training()) kept.push_back(x.detach().reshape({x.size(0), -1}).repeat({1, 16}));
    return inner->forward(x);
  }
};

std::shared_ptr<data::Dataset> MapInput(std::shared_ptr<const data::Dataset> d,
                                        std::function<Tensor(const Tensor&)> f) {
  return std::make_shared<data::MapDataset>(std::move(d), std::make_shared<data::Lambda>(std::move(f), "fault"));
}

// One fault beside its twin: `apply(spec, plan, context, faulty)` turns the recipe into either.
struct Case {
  std::string name, fault, twin;
  std::set<std::string> expect;  // any of these fired: the fault was found
  std::function<void(v1::JobSpec&, bool)> spec;
  std::function<void(workers::JobPlan&, train::DoctorContext&, bool)> plan;
};

struct Run {
  std::vector<train::Finding> findings;
  std::string error;
  double seconds = 0;
};

Run Train(v1::JobSpec spec, const Case* c, bool faulty, uint64_t seed, const std::string& root,
          const std::string& datasets) {
  Run out;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    spec.set_seed(seed);
    if (c && c->spec) c->spec(spec, faulty);
    spec = server::validate_job_spec(spec, {root, {"cpu"}, 0});
    workers::JobPlan plan = workers::make_job_plan(spec, {root, datasets, "", kCPU, 0});
    plan.options.checkpoint_path.clear();
    plan.options.checkpoint_every_epoch = false;
    train::DoctorContext context{.loader_workers = spec.loader_workers(),
                                 .batch_size = spec.batch_size(),
                                 .loss = spec.loss(),
                                 .precision = spec.precision(),
                                 .device = "cpu"};
    if (c && c->plan) c->plan(plan, context, faulty);
    auto doctor = std::make_shared<train::Doctor>(context);
    workers::WorkerEvent base;
    const std::function<void(const workers::WorkerEvent&)> ignore = [](const workers::WorkerEvent&) {};
    workers::check_first_batch(*doctor, plan, base, ignore);
    train::Trainer trainer(plan.model.module, plan.optimizer, plan.options, plan.loss);
    if (plan.scheduler) trainer.set_scheduler(plan.scheduler);
    train::Callbacks callbacks = workers::event_callbacks(base, plan.total_steps, ignore, doctor, {});
    if (std::getenv("ANVIL_RECALL_TRACE")) {  // every interval's numbers, to see what a rule saw
      callbacks.on_step = [inner = callbacks.on_step](const train::StepMetrics& m) {
        std::fprintf(stderr,
                     "    step %lld loss %.4g grad_norm %.4g update_ratio %.3g utilisation %.3f allocated %lld\n",
                     static_cast<long long>(m.step), m.loss, m.grad_norm, m.update_ratio, m.device_utilisation,
                     static_cast<long long>(m.memory_allocated_bytes));
        inner(m);
      };
    }
    trainer.set_callbacks(std::move(callbacks));
    data::DataLoader train_loader(plan.train_set, plan.train_loader);
    data::DataLoader val_loader(plan.val_set, plan.val_loader);
    try {
      trainer.fit(train_loader, &val_loader);
    } catch (const train::NonFiniteLossError& e) {
      (void)doctor->on_non_finite(e.step(), e.what());
    }
    out.findings = doctor->findings();
    if (std::getenv("ANVIL_RECALL_VERBOSE")) {
      for (const train::Finding& f : out.findings) {
        std::fprintf(stderr, "  %s %s %s steps %lld..%lld:", c ? c->name.c_str() : spec.model_preset().c_str(),
                     faulty ? "fault" : "twin", f.code.c_str(), static_cast<long long>(f.first_step),
                     static_cast<long long>(f.last_step));
        for (const auto& [k, v] : f.evidence) std::fprintf(stderr, " %s=%.4g", k.c_str(), v);
        std::fprintf(stderr, "\n");
      }
    }
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

bool Fired(const Run& r, const std::set<std::string>& codes) {
  return std::any_of(r.findings.begin(), r.findings.end(),
                     [&](const train::Finding& f) { return codes.count(f.code); });
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"lr_x100",
                   "AdamW at lr 0.1 (100x the recipe's 1e-3)",
                   "lr 1e-3",
                   {"LR_TOO_HIGH", "EXPLODING_GRADIENTS"},
                   [](v1::JobSpec& s, bool faulty) {
                     if (faulty) s.mutable_optimizer()->set_lr(0.1);
                   },
                   {}});
  cases.push_back({"raw_pixels",
                   "inputs as raw pixel values in [0, 255]",
                   "inputs in [0, 1]",
                   {"INPUT_NOT_NORMALIZED"},
                   {},
                   [](workers::JobPlan& p, train::DoctorContext&, bool faulty) {
                     if (!faulty) return;
                     const auto pixels = [](const Tensor& x) { return (x * 255.0).round(); };
                     p.train_set = MapInput(p.train_set, pixels);
                     p.val_set = MapInput(p.val_set, pixels);
                   }});
  cases.push_back({"slow_loader",
                   "loader_workers 0 and a transform of 1 ms per sample",
                   "no slow transform",
                   {"DATA_STALL"},
                   [](v1::JobSpec& s, bool) { s.set_epochs(2); },
                   [](workers::JobPlan& p, train::DoctorContext&, bool faulty) {
                     if (!faulty) return;
                     p.train_set = MapInput(p.train_set, [](const Tensor& x) {
                       std::this_thread::sleep_for(std::chrono::milliseconds(1));
                       return x;
                     });
                   }});
  cases.push_back({"sigmoid_then_bce_with_logits",
                   "a binary model ending in Sigmoid, trained with BCE-with-logits",
                   "the same model without its Sigmoid",
                   {"LOGITS_PASSED_AS_PROBABILITIES"},
                   {},
                   [](workers::JobPlan& p, train::DoctorContext& ctx, bool faulty) {
                     // Digit 0 against the rest: one logit, a float target.
                     const auto binary = [](data::Example e) {
                       const Tensor zero = (e[data::Example::kTarget] == 0).to(kFloat32).reshape({1});
                       e.set(data::Example::kTarget, zero);
                       return e;
                     };
                     p.train_set = std::make_shared<data::MapDataset>(p.train_set, binary, "zero-vs-rest");
                     p.val_set = std::make_shared<data::MapDataset>(p.val_set, binary, "zero-vs-rest");
                     auto m = std::make_shared<nn::Sequential>();
                     m->push_back(std::make_shared<nn::Flatten>());
                     m->push_back(std::make_shared<nn::Linear>(64, 32));
                     m->push_back(std::make_shared<nn::ReLU>());
                     m->push_back(std::make_shared<nn::Linear>(32, 1));
                     if (faulty) m->push_back(std::make_shared<nn::Sigmoid>());
                     p.model.module = m;
                     p.optimizer = std::make_shared<optim::AdamW>(m->parameters(), optim::Options{{"lr", 1e-3}});
                     p.scheduler = nullptr;
                     p.loss = [](const Tensor& out, const Tensor& target) {
                       return nn::functional::binary_cross_entropy_with_logits(out, target);
                     };
                     ctx.loss = "bce_with_logits";
                   }});
  cases.push_back({"dead_relu_init",
                   "the first layer's biases at -10",
                   "default initialisation",
                   {"DEAD_RELU"},
                   {},
                   [](workers::JobPlan& p, train::DoctorContext&, bool faulty) {
                     if (!faulty) return;
                     for (auto& [name, t] : p.model.module->named_parameters()) {
                       if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
                         NoGradGuard g;
                         t.fill_(-10.0);  // the first layer's biases: every unit starts dead
                         break;
                       }
                     }
                   }});
  cases.push_back({"overfitting",
                   "5 % of the training data, 100 epochs",
                   "all of it, the recipe's 10 epochs",
                   {"OVERFITTING"},
                   [](v1::JobSpec& s, bool faulty) {
                     if (faulty) s.set_epochs(100);
                   },
                   [](workers::JobPlan& p, train::DoctorContext&, bool faulty) {
                     if (!faulty) return;
                     std::vector<int64_t> few;
                     for (int64_t i = 0; i < p.train_set->size() / 20; ++i) few.push_back(i);
                     p.train_set = std::make_shared<data::Subset>(p.train_set, few);
                   }});
  cases.push_back({"fp16_tiny_scale",
                   "fp16 with the loss scale at 1e-4 (gradients underflow)",
                   "fp16 with the default scaler",
                   {"AMP_SKIP_STORM"},
                   [](v1::JobSpec& s, bool) { s.set_precision("fp16"); },
                   [](workers::JobPlan& p, train::DoctorContext&, bool faulty) {
                     if (!faulty) return;
                     optim::GradScalerOptions o = p.options.grad_scaler.value_or(optim::GradScalerOptions{});
                     o.init_scale = 1e-4;
                     o.growth_interval = 1 << 30;
                     p.options.grad_scaler = o;
                   }});
  cases.push_back({"host_read_per_step",
                   "a model that reads a device value in every forward",
                   "the same model without the read",
                   {"HOST_SYNC_PER_STEP"},
                   {},
                   [](workers::JobPlan& p, train::DoctorContext&, bool faulty) {
                     p.model.module = std::make_shared<ReadsTheHost>(p.model.module, faulty);
                   }});
  cases.push_back({"starved_by_loader",
                   "one loader worker and a transform of 1 ms per sample (the step waits on the loader)",
                   "one loader worker, no slow transform",
                   {"LOW_DEVICE_UTILISATION"},
                   [](v1::JobSpec& s, bool) { s.set_loader_workers(1); },
                   [](workers::JobPlan& p, train::DoctorContext&, bool faulty) {
                     if (!faulty) return;
                     p.train_set = MapInput(p.train_set, [](const Tensor& x) {
                       std::this_thread::sleep_for(std::chrono::milliseconds(1));
                       return x;
                     });
                   }});
  cases.push_back({"unbounded_cache",
                   "a model whose forward keeps 256 KiB a step in a cache nothing frees",
                   "the same model keeping nothing",
                   {"MEMORY_FRAGMENTATION"},
                   {},
                   [](workers::JobPlan& p, train::DoctorContext&, bool faulty) {
                     p.model.module = std::make_shared<KeepsACache>(p.model.module, faulty);
                   }});
  return cases;
}

// The sequence presets' task: the class of a 12-token sequence over a vocabulary of 50 is how
// many of its tokens are below 10 (0, 1, 2, or 3 and more: a count either preset can learn);
// 2,000 sequences, one in five held out; the recipe's AdamW at 1e-3.
Case TokenTask(const std::string& preset) {
  return {"tokens", "", "", {}, {}, [preset](workers::JobPlan& p, train::DoctorContext&, bool) {
            const Tensor x = randint(0, 50, {2000, 12});
            const Tensor y = (x < 10).to(kInt64).sum({1}).clamp(0, 3);
            std::vector<int64_t> train_rows, val_rows;
            for (int64_t i = 0; i < 2000; ++i) (i % 5 == 0 ? val_rows : train_rows).push_back(i);
            auto all = std::make_shared<data::TensorDataset>(x, y);
            p.train_set = std::make_shared<data::Subset>(all, train_rows);
            p.val_set = std::make_shared<data::Subset>(all, val_rows);
            p.model = models::build_model(models::preset_spec(preset, {12}, 4, 50));
            p.optimizer = std::make_shared<optim::AdamW>(p.model.module->parameters(), optim::Options{{"lr", 1e-3}});
            p.scheduler = nullptr;
          }};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATASETS_DIR [SEEDS]\n", argv[0]);
    return 2;
  }
  const std::string datasets = argv[1];
  const int seeds = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::string root = std::filesystem::temp_directory_path() / "anvil-doctor-recall";
  std::filesystem::create_directories(root);
  const CpuKernelInfo cpu = cpu_kernel_info();
  std::printf(
      "CPU: %s, ISA %s, %d threads; digits recipe: the mlp preset, AdamW lr 1e-3, batch 64, 10 epochs; "
      "%d seeds\n\n",
      cpu.model.c_str(), cpu.isa.c_str(), get_num_threads(), seeds);

  v1::JobSpec recipe;
  recipe.set_name("recall");
  recipe.set_model_preset("mlp");
  recipe.mutable_dataset()->set_name("digits");

  std::printf(
      "| fault | expected | fault runs that fired it | twin runs that fired it | other codes (fault / twin) |\n");
  std::printf("|---|---|---:|---:|---|\n");
  int found = 0, total = 0, false_twins = 0, twins = 0;
  // ANVIL_RECALL_CASES=name,name: only those fault cases (and no presets), to look at one rule.
  const char* only = std::getenv("ANVIL_RECALL_CASES");
  const auto wanted = [&](const std::string& name) {
    return only == nullptr || ("," + std::string(only) + ",").find("," + name + ",") != std::string::npos;
  };
  for (const Case& c : Cases()) {
    if (!wanted(c.name)) continue;
    int hit = 0, twin_hit = 0;
    std::map<std::string, int> other_fault, other_twin;
    for (int seed = 0; seed < seeds; ++seed) {
      for (const bool faulty : {true, false}) {
        const Run r = Train(recipe, &c, faulty, static_cast<uint64_t>(seed), root, datasets);
        if (!r.error.empty())
          std::fprintf(stderr, "%s seed %d %s: %s\n", c.name.c_str(), seed, faulty ? "fault" : "twin", r.error.c_str());
        const bool fired = Fired(r, c.expect);
        (faulty ? hit : twin_hit) += fired;
        for (const train::Finding& f : r.findings)
          if (!c.expect.count(f.code)) ++(faulty ? other_fault : other_twin)[f.code];
      }
    }
    found += hit;
    total += seeds;
    false_twins += twin_hit;
    twins += seeds;
    std::string expect, other;
    for (const std::string& e : c.expect) expect += (expect.empty() ? "" : " or ") + e;
    for (const auto& [code, n] : other_fault)
      other += code + " " + std::to_string(n) + "/" + std::to_string(seeds) + " ";
    other += "/ ";
    for (const auto& [code, n] : other_twin)
      other += code + " " + std::to_string(n) + "/" + std::to_string(seeds) + " ";
    std::printf("| %s: %s (twin: %s) | %s | %d/%d | %d/%d | %s |\n", c.name.c_str(), c.fault.c_str(), c.twin.c_str(),
                expect.c_str(), hit, seeds, twin_hit, seeds, other.c_str());
    std::fflush(stdout);
  }
  std::printf("\nRecall: %d/%d (%.0f %%); twins that fired their fault's code: %d/%d\n\n", found, total,
              100.0 * found / std::max(total, 1), false_twins, twins);

  // The presets at their default recipes (the spec's defaults: AdamW 1e-3, batch 64, 10
  // epochs, no loader workers): every finding here is one a healthy run shows.
  std::printf("| preset, default recipe | runs with a warning or worse | findings over the seeds | s per run |\n");
  std::printf("|---|---:|---|---:|\n");
  for (const std::string preset : {"mlp", "lenet5", "resnet", "gru", "transformer"}) {
    if (only != nullptr) break;
    const bool sequence = preset == "gru" || preset == "transformer";
    v1::JobSpec spec = recipe;
    // The sequence presets take token ids: the plan is built from digits, then given a token
    // task (TokenTask) and the preset's model.
    spec.set_model_preset(sequence ? "mlp" : preset);
    int warned = 0;
    double seconds = 0;
    std::map<std::string, int> seen;
    std::string error;
    const Case task = TokenTask(preset);
    for (int seed = 0; seed < seeds; ++seed) {
      const Run r = Train(spec, sequence ? &task : nullptr, false, static_cast<uint64_t>(seed), root, datasets);
      seconds += r.seconds;
      if (!r.error.empty()) error = r.error;
      bool warning = false;
      for (const train::Finding& f : r.findings) {
        ++seen[f.code + " (" + train::severity_name(f.severity) + ")"];
        warning |= f.severity >= train::Severity::kWarning;
      }
      warned += warning;
    }
    std::string codes;
    for (const auto& [code, n] : seen) codes += code + " " + std::to_string(n) + "/" + std::to_string(seeds) + " ";
    if (!error.empty()) codes += "error: " + error.substr(0, 100);
    std::printf("| %s (%s) | %d/%d | %s | %.1f |\n", preset.c_str(),
                sequence ? "12 tokens of 50: how many below 10" : "digits", warned, seeds,
                codes.empty() ? "-" : codes.c_str(), seconds / seeds);
    std::fflush(stdout);
  }
  std::filesystem::remove_all(root);
  return 0;
}
