// `anvil predict NAME[:VERSION] --input FILE`: a model's top classes for each sample in a
// file, and the accuracy when the file carries the true classes (--label-column).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

#include "client/commands/commands.h"
#include "client/commands/model_ref.h"
#include "client/exit_codes.h"
#include "client/input_file.h"

namespace anvil::client {
namespace {

struct PredictArgs {
  std::string model_ref, input_path, label_column;
  int64_t top_k = 3;
};

// Whether a label cell names the predicted class: its index, or its name.
bool LabelMatches(const std::string& cell, int64_t cls, const std::string& name) {
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  if (end != cell.c_str() && *end == '\0') return v == static_cast<double>(cls);
  return cell == name;
}

int RunPredict(Context& cli, const PredictArgs& a) {
  const ModelRef ref = parse_model_ref(a.model_ref);
  v1::GetModelRequest g;
  g.set_name(ref.name);
  g.set_version(ref.version);
  v1::Model m;
  check(cli.serving->GetModel(cli.call().get(), g, &m), "model " + a.model_ref);
  std::vector<int64_t> shape(m.inputs(0).shape().begin() + 1, m.inputs(0).shape().end());
  v1::PredictRequest req;
  req.set_model(ref.name);
  req.set_version(ref.version);
  req.set_top_k(a.top_k);
  InputFile input;
  try {
    input = read_input_file(a.input_path, shape, a.label_column);
  } catch (const std::runtime_error& e) {
    throw Failure(kExitBadInput, e.what());
  }
  // On stderr, so --json output stays one document.
  if (!input.note.empty()) std::fprintf(stderr, "note: %s\n", input.note.c_str());
  *req.add_inputs() = std::move(input.tensor);
  v1::PredictResponse resp;
  check(cli.serving->Predict(cli.call().get(), req, &resp), "predict " + a.model_ref);
  if (cli.json) {
    std::printf("%s\n", to_json(resp).c_str());
    return 0;
  }
  int64_t correct = 0;
  for (int r = 0; r < resp.top_k_size(); ++r) {
    const v1::TopK& t = resp.top_k(r);
    std::printf("sample %d:", r);
    for (int j = 0; j < t.classes_size(); ++j)
      std::printf("  %s (%.1f%%)", t.labels(j).c_str(), 100.0 * t.probabilities(j));
    if (!input.labels.empty() && t.classes_size() > 0) {
      const bool right = LabelMatches(input.labels[static_cast<size_t>(r)], t.classes(0), t.labels(0));
      correct += right;
      std::printf("  label %s%s", input.labels[static_cast<size_t>(r)].c_str(), right ? "" : "  (wrong)");
    }
    std::printf("\n");
  }
  if (!input.labels.empty()) {
    std::printf("accuracy: %.1f%% (%lld of %d)\n", 100.0 * static_cast<double>(correct) / resp.top_k_size(),
                static_cast<long long>(correct), resp.top_k_size());
  }
  return 0;
}

}  // namespace

CommandAction predict_command(CLI::App& cmd) {
  auto a = std::make_shared<PredictArgs>();
  cmd.add_option("model", a->model_ref, "NAME[:VERSION]")->required();
  cmd.add_option("--input", a->input_path, "CSV (one sample per row), JSON (array of samples) or an image")->required();
  cmd.add_option("--top-k", a->top_k, "classes to show per sample (default 3)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd.add_option("--label-column", a->label_column,
                 "CSV: the column holding each sample's true class (index from 0, -1 for the last, or the "
                 "header's name); it is left out of the input and the accuracy is reported");
  return [a](Context& cli) { return RunPredict(cli, *a); };
}

}  // namespace anvil::client
