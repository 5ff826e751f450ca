#include "workers/job_quantize.h"

#include <nlohmann/json.hpp>

#include "core/onnx/quantize_graph.h"
#include "core/util/file.h"
#include "core/util/log.h"

namespace anvil::workers {

quant::PtqOptions ptq_options(const v1::QuantizeSpec& spec) {
  quant::PtqOptions o;
  o.mode = quant::ptq_mode_from_name(spec.mode());
  o.calibration_batches = spec.calibration_batches();
  o.qconfig.activation = quant::activation_observer_from_name(spec.observer());
  o.qconfig.per_channel_weights = !spec.per_tensor_weights();
  o.max_accuracy_drop = spec.max_accuracy_drop();
  o.qconfig.keep_float = {spec.keep_float().begin(), spec.keep_float().end()};
  return o;
}

std::string describe_quantize_spec(const v1::QuantizeSpec& spec, int64_t calibrated) {
  std::string weights = spec.per_tensor_weights() ? ", per-tensor weights" : "";
  if (spec.keep_float_size() > 0) {
    weights += ", kept in float:";
    for (const std::string& path : spec.keep_float()) weights += " " + path;
  }
  if (spec.mode() == "dynamic") return "dynamic" + weights;
  const int64_t batches = calibrated >= 0 ? calibrated : spec.calibration_batches();
  return "static (" + spec.observer() + ", " + std::to_string(batches) + " calibration batch" +
         (batches == 1 ? "" : "es") + weights + ")";
}

namespace {

// A failure before any verdict, said in the summary and classified for the caller.
void Failed(QuantizeOutcome& out, const Error& e) {
  out.summary = std::string("int8 quantization failed: ") + e.what();
  out.failure = dynamic_cast<const quant::QuantizationInputError*>(&e) != nullptr ? QuantizeOutcome::Failure::kInput
                                                                                  : QuantizeOutcome::Failure::kModel;
  engine_log(LogSeverity::kWarning, out.summary);
}

}  // namespace

QuantizeOutcome quantize_trained_model(const v1::QuantizeSpec& spec, JobPlan& plan, const models::ModelInfo& info,
                                       const std::string& archive_path, uint64_t seed) {
  QuantizeOutcome out;
  try {
    quant::PtqOptions o = ptq_options(spec);
    o.input_key = plan.options.input_key;
    o.target_key = plan.options.target_key;
    // The int8 kernels are the CPU's: the trained weights are copied into a CPU float model
    // first (the trained one may live on a GPU, and stays as it is).
    auto float_cpu = models::build_model(plan.model.spec).module;
    float_cpu->load_state_dict(plan.model.module->state_dict());
    data::DataLoader calibration(plan.train_set,
                                 {.batch_size = plan.train_loader.batch_size, .shuffle = true, .seed = seed + 1});
    const bool has_val = plan.val_set != nullptr && plan.val_set->size() > 0;
    data::DataLoader validation(has_val ? plan.val_set : plan.train_set, {.batch_size = 256});
    const quant::PtqResult r = quant::post_training_quantize(*float_cpu, models::build_model(plan.model.spec).module,
                                                             calibration, validation, o);
    out.float_accuracy = r.float_accuracy;
    out.int8_accuracy = r.int8_accuracy;
    out.layers = r.layers;
    out.summary = r.summary + (has_val ? "" : " (measured on the training split: the job has no validation split)");
    if (!r.passed) return out;
    models::ModelInfo q = info;
    q.precision = "int8";
    q.quantization = describe_quantize_spec(spec, r.calibration_batches);
    q.accuracy.clear();
    if (r.float_accuracy) q.accuracy["fp32"] = *r.float_accuracy;
    if (r.int8_accuracy) q.accuracy["int8"] = *r.int8_accuracy;
    models::save_model_archive(archive_path, *r.model, plan.model.spec, q);
    out.archive = archive_path;
  } catch (const Error& e) {
    Failed(out, e);
  }
  return out;
}

QuantizeOutcome quantize_imported_model(const v1::QuantizeSpec& spec, const std::string& onnx_bytes,
                                        const JobData& data, int64_t batch_size, const std::string& path,
                                        uint64_t seed) {
  QuantizeOutcome out;
  try {
    const quant::PtqOptions o = ptq_options(spec);
    data::DataLoader calibration(data.train_set,
                                 {.batch_size = std::max<int64_t>(batch_size, 1), .shuffle = true, .seed = seed + 1});
    const bool has_val = data.val_set != nullptr && data.val_set->size() > 0;
    data::DataLoader validation(has_val ? data.val_set : data.train_set, {.batch_size = 256});
    const onnx::OnnxPtqResult r = onnx::post_training_quantize_onnx(onnx_bytes, calibration, validation, o);
    out.float_accuracy = r.float_accuracy;
    out.int8_accuracy = r.int8_accuracy;
    out.summary = r.summary + (has_val ? "" : " (measured on the training split: the dataset has no validation split)");
    if (!r.passed) return out;
    nlohmann::json accuracy = nlohmann::json::object();
    if (r.float_accuracy) accuracy["fp32"] = *r.float_accuracy;
    if (r.int8_accuracy) accuracy["int8"] = *r.int8_accuracy;
    const std::string bytes =
        onnx::with_metadata(r.graph.model, {{"anvil.quantization", describe_quantize_spec(spec, r.calibration_batches)},
                                            {"anvil.accuracy", accuracy.dump()}});
    write_file_atomic(path, bytes);
    out.archive = path;
  } catch (const Error& e) {
    Failed(out, e);
  }
  return out;
}

}  // namespace anvil::workers
