// `anvil quantize NAME[:VERSION]`: an int8 version of a model, registered if it passes the
// accuracy gate (docs/quantization.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "client/commands/commands.h"
#include "client/commands/model_ref.h"
#include "client/commands/print.h"
#include "client/exit_codes.h"

namespace anvil::client {
namespace {

struct QuantizeArgs {
  std::string model_ref;
  std::string mode = "static", observer = "histogram";
  int64_t calibration_batches = 16;
  double max_drop = 1.0;
  std::string dataset, label_column;
  uint64_t seed = 0;
  std::vector<std::string> keep_float;
  bool per_tensor_weights = false;
};

int RunQuantize(Context& cli, const QuantizeArgs& a) {
  const ModelRef ref = parse_model_ref(a.model_ref);
  v1::QuantizeRequest req;
  req.set_model(ref.name);
  req.set_version(ref.version);
  req.mutable_spec()->set_mode(a.mode);
  req.mutable_spec()->set_observer(a.observer);
  req.mutable_spec()->set_calibration_batches(a.calibration_batches);
  req.mutable_spec()->set_max_accuracy_drop(a.max_drop);
  req.mutable_spec()->set_per_tensor_weights(a.per_tensor_weights);
  for (const std::string& path : a.keep_float) req.mutable_spec()->add_keep_float(path);
  if (!a.dataset.empty()) {
    const bool builtin = a.dataset == "digits" || a.dataset == "blobs" || a.dataset == "spirals";
    if (builtin) {
      req.mutable_dataset()->set_name(a.dataset);
    } else {
      req.mutable_dataset()->set_path(a.dataset);
    }
    req.mutable_dataset()->set_label_column(a.label_column);
    req.set_seed(a.seed);
  }
  v1::QuantizeResponse resp;
  check(cli.serving->Quantize(cli.call(600).get(), req, &resp), "quantize " + a.model_ref);
  if (cli.json) {
    std::printf("%s\n", to_json(resp).c_str());
  } else {
    std::printf("%s\n", resp.message().c_str());
    for (int i = 0; i < resp.layers_size() && i < 5; ++i)
      std::printf("  layer %-8s %-22s SQNR %6.1f dB\n", resp.layers(i).layer().c_str(), resp.layers(i).type().c_str(),
                  resp.layers(i).sqnr_db());
    if (resp.registered()) print_model_summary(resp.model());
  }
  // A version the gate refused is a refusal (7), as FAILED_PRECONDITION is: understood, not
  // allowed as asked; --max-accuracy-drop or --keep-float change the answer.
  return resp.registered() ? kExitOk : kExitRefused;
}

}  // namespace

CommandAction quantize_command(CLI::App& cmd) {
  auto a = std::make_shared<QuantizeArgs>();
  cmd.add_option("model", a->model_ref, "NAME[:VERSION]")->required();
  cmd.add_option("--mode", a->mode, "static (calibrated; default) or dynamic")
      ->check(CLI::IsMember({"static", "dynamic"}));
  cmd.add_option("--observer", a->observer, "static: histogram (default), minmax, moving_average_minmax")
      ->check(CLI::IsMember({"histogram", "minmax", "moving_average_minmax"}));
  cmd.add_option("--calibration-batches", a->calibration_batches, "static: training batches observed (16)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}));
  cmd.add_option("--max-accuracy-drop", a->max_drop, "points of validation accuracy int8 may lose (1)")
      ->check(CLI::Range(0.0, 100.0));
  cmd.add_option("--dataset", a->dataset,
                 "calibrate and evaluate on this dataset: a built-in (digits, blobs, spirals) or a path in "
                 "the server's data root (default: the training job's; needed for an imported ONNX model)");
  cmd.add_option("--label-column", a->label_column, "with --dataset, a CSV's label column");
  cmd.add_option("--seed", a->seed, "with --dataset, the seed of generated data and the split (0)");
  cmd.add_option("--keep-float", a->keep_float,
                 "leave this layer in float32 (repeatable): a path the per-layer errors report (\"3\", "
                 "\"2.body.0\"), or an imported graph's node name");
  cmd.add_flag("--per-tensor-weights", a->per_tensor_weights,
               "one scale per weight tensor instead of one per output channel");
  return [a](Context& cli) { return RunQuantize(cli, *a); };
}

}  // namespace anvil::client
