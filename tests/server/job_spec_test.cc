// Spec validation: the defaults a minimal spec gets, and one refused case per field, each
// with the status code and a message naming the field.
#include "server/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "server/status.h"

namespace anvil::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class JobSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("anvil-spec-" + std::to_string(::getpid()));
    fs::create_directories(root_ / "sets");
    std::ofstream(root_ / "sets" / "iris.csv") << "a,b,label\n1,2,x\n3,4,y\n";
    std::ofstream(root_ / "sets" / "notes.txt") << "not a table\n";
    fs::create_directories(root_.parent_path() / "outside-secret");
    ctx_ = {fs::canonical(root_).string(), {"cpu"}};
  }
  void TearDown() override { fs::remove_all(root_); }

  static v1::JobSpec Minimal() {
    v1::JobSpec s;
    s.set_model_preset("mlp");
    s.mutable_dataset()->set_name("digits");
    return s;
  }

  // The code and message validate_job_spec throws for `spec` (OK and "" when it accepts it).
  std::pair<grpc::StatusCode, std::string> Refusal(const v1::JobSpec& spec) {
    try {
      validate_job_spec(spec, ctx_);
    } catch (const ServiceError& e) {
      return {to_grpc(e.status()).error_code(), e.what()};  // as the client sees it
    }
    return {grpc::StatusCode::OK, ""};
  }

  fs::path root_;
  SpecContext ctx_;
};

TEST_F(JobSpecTest, FillsDefaults) {
  const v1::JobSpec s = validate_job_spec(Minimal(), ctx_);
  EXPECT_EQ(s.name(), "job");
  EXPECT_EQ(s.batch_size(), 64);
  EXPECT_EQ(s.epochs(), 10);
  EXPECT_EQ(s.optimizer().name(), "adamw");
  EXPECT_DOUBLE_EQ(s.optimizer().lr(), 1e-3);
  EXPECT_EQ(s.loss(), "cross_entropy");
  EXPECT_EQ(s.device(), "any");
  EXPECT_EQ(s.accumulation_steps(), 1);
  EXPECT_EQ(s.metric_interval(), 10);
  EXPECT_DOUBLE_EQ(s.dataset().validation_fraction(), 0.2);
  EXPECT_EQ(s.register_model(), "job");
}

TEST_F(JobSpecTest, AcceptsADatasetPathInsideTheRoot) {
  v1::JobSpec s = Minimal();
  s.mutable_dataset()->clear_name();
  s.mutable_dataset()->set_path("sets/../sets/iris.csv");
  EXPECT_EQ(Refusal(s).first, grpc::StatusCode::OK) << Refusal(s).second;
  // A label column by name, by index, and counted from the end.
  for (const char* label : {"label", "0", "-1"}) {
    s.mutable_dataset()->set_label_column(label);
    EXPECT_EQ(Refusal(s).first, grpc::StatusCode::OK) << label << ": " << Refusal(s).second;
  }
  // Only the first lines are read at submit: a bad row further down is the job's to find.
  std::ofstream(root_ / "sets" / "late.csv") << "a,b,label\n1,2,x\n3,oops,y\n";
  s.mutable_dataset()->set_path("sets/late.csv");
  s.mutable_dataset()->set_label_column("label");
  EXPECT_EQ(Refusal(s).first, grpc::StatusCode::OK) << Refusal(s).second;
}

TEST_F(JobSpecTest, RefusesEachBadField) {
  using Mutate = std::function<void(v1::JobSpec&)>;
  struct Case {
    const char* what;
    Mutate mutate;
    grpc::StatusCode code;
    const char* message;
  };
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  const auto kDenied = grpc::StatusCode::PERMISSION_DENIED;
  const std::vector<Case> cases = {
      {"name", [](auto& s) { s.set_name("bad name!"); }, kInvalid, "spec.name"},
      {"client_job_id", [](auto& s) { s.set_client_job_id(std::string(129, 'x')); }, kInvalid, "spec.client_job_id"},
      {"no model", [](auto& s) { s.clear_model_preset(); }, kInvalid, "spec.model: expected exactly one"},
      {"two models", [](auto& s) { s.set_model_json("{}"); }, kInvalid, "got both"},
      {"preset", [](auto& s) { s.set_model_preset("vgg"); }, kInvalid, "spec.model_preset"},
      {"model_json",
       [](auto& s) {
         s.clear_model_preset();
         s.set_model_json("{\"layers\": 3}");
       },
       kInvalid, "spec.model_json"},
      {"no dataset", [](auto& s) { s.mutable_dataset()->clear_name(); }, kInvalid, "spec.dataset"},
      {"dataset name", [](auto& s) { s.mutable_dataset()->set_name("imagenet"); }, kInvalid, "spec.dataset.name"},
      {"traversal",
       [](auto& s) {
         s.mutable_dataset()->clear_name();
         s.mutable_dataset()->set_path("../../etc/passwd");
       },
       kDenied, "outside the server's data root"},
      {"sibling dir",
       [](auto& s) {
         s.mutable_dataset()->clear_name();
         s.mutable_dataset()->set_path("../outside-secret");
       },
       kDenied, "outside"},
      {"absolute",
       [](auto& s) {
         s.mutable_dataset()->clear_name();
         s.mutable_dataset()->set_path("/etc/passwd");
       },
       kDenied, "relative"},
      {"url",
       [](auto& s) {
         s.mutable_dataset()->clear_name();
         s.mutable_dataset()->set_path("http://x/y.csv");
       },
       kDenied, "URLs"},
      {"missing file",
       [](auto& s) {
         s.mutable_dataset()->clear_name();
         s.mutable_dataset()->set_path("nope.csv");
       },
       kInvalid, "does not exist"},
      {"validation_fraction", [](auto& s) { s.mutable_dataset()->set_validation_fraction(0.95); }, kInvalid,
       "validation_fraction"},
      // label_column is checked against the file's header at submit, not when the job starts.
      {"label_column not in the header",
       [](auto& s) {
         s.mutable_dataset()->clear_name();
         s.mutable_dataset()->set_path("sets/iris.csv");
         s.mutable_dataset()->set_label_column("nope");
       },
       kInvalid,
       "spec.dataset.label_column: <data>/sets/iris.csv:1: label_column: no column named 'nope' in the header "
       "('a', 'b', 'label')"},
      {"label_column index out of range",
       [](auto& s) {
         s.mutable_dataset()->clear_name();
         s.mutable_dataset()->set_path("sets/iris.csv");
         s.mutable_dataset()->set_label_column("3");
       },
       kInvalid, "label_column 3 is out of range for 3 columns"},
      {"label_column of a built-in dataset", [](auto& s) { s.mutable_dataset()->set_label_column("label"); }, kInvalid,
       "spec.dataset.label_column: applies to CSV/TSV files; \"digits\" is a built-in dataset"},
      {"label_column of an image folder",
       [](auto& s) {
         s.mutable_dataset()->clear_name();
         s.mutable_dataset()->set_path("sets");
         s.mutable_dataset()->set_label_column("label");
       },
       kInvalid, "\"sets\" is an image folder"},
      {"a table that is not a table",
       [](auto& s) {
         s.mutable_dataset()->clear_name();
         s.mutable_dataset()->set_path("sets/notes.txt");
       },
       kInvalid, "spec.dataset.path: expected a .csv/.tsv file"},
      {"batch_size", [](auto& s) { s.set_batch_size(-1); }, kInvalid, "spec.batch_size"},
      {"epochs", [](auto& s) { s.set_epochs(-3); }, kInvalid, "spec.epochs"},
      {"max_steps", [](auto& s) { s.set_max_steps(-1); }, kInvalid, "spec.max_steps"},
      {"optimizer", [](auto& s) { s.mutable_optimizer()->set_name("lbfgs"); }, kInvalid, "spec.optimizer.name"},
      {"lr", [](auto& s) { s.mutable_optimizer()->set_lr(-0.1); }, kInvalid, "spec.optimizer.lr"},
      {"weight_decay", [](auto& s) { s.mutable_optimizer()->set_weight_decay(2); }, kInvalid, "weight_decay"},
      {"momentum", [](auto& s) { s.mutable_optimizer()->set_momentum(1.5); }, kInvalid, "momentum"},
      {"betas", [](auto& s) { s.mutable_optimizer()->add_betas(0.9); }, kInvalid, "betas"},
      {"nesterov", [](auto& s) { s.mutable_optimizer()->set_nesterov(true); }, kInvalid, "nesterov"},
      {"schedule", [](auto& s) { s.mutable_schedule()->set_name("cyclic"); }, kInvalid, "spec.schedule.name"},
      {"step_size", [](auto& s) { s.mutable_schedule()->set_name("step"); }, kInvalid, "step_size"},
      {"loss", [](auto& s) { s.set_loss("hinge"); }, kInvalid, "spec.loss"},
      {"device", [](auto& s) { s.set_device("tpu"); }, kInvalid, "spec.device"},
      {"absent cuda", [](auto& s) { s.set_device("cuda:0"); }, kInvalid, "not a device of this server"},
      {"loader_workers", [](auto& s) { s.set_loader_workers(99); }, kInvalid, "loader_workers"},
      {"checkpoint", [](auto& s) { s.mutable_checkpoint()->set_every_steps(-5); }, kInvalid, "checkpoint.every_steps"},
      {"monitor", [](auto& s) { s.mutable_early_stopping()->set_monitor("f1"); }, kInvalid, "early_stopping.monitor"},
      {"patience", [](auto& s) { s.mutable_early_stopping()->set_patience(-1); }, kInvalid, "patience"},
      {"clip", [](auto& s) { s.set_clip_grad_norm(-1); }, kInvalid, "clip_grad_norm"},
      {"accumulation", [](auto& s) { s.set_accumulation_steps(5000); }, kInvalid, "accumulation_steps"},
      {"metric_interval", [](auto& s) { s.set_metric_interval(-2); }, kInvalid, "metric_interval"},
      {"register_model", [](auto& s) { s.set_register_model("../x"); }, kInvalid, "register_model"},
      {"priority", [](auto& s) { s.set_priority(1000); }, kInvalid, "priority"},
      {"doctor action, data-parallel",
       [](auto& s) {
         s.set_world_size(2);
         s.mutable_doctor()->set_on_overfitting("stop");
       },
       kInvalid, "spec.doctor.on_overfitting: the doctor's actions are for single-process jobs"},
      {"doctor on_data_stall", [](auto& s) { s.mutable_doctor()->set_on_data_stall("more"); }, kInvalid,
       "spec.doctor.on_data_stall: expected \"add_workers\" or nothing, got \"more\""},
      {"doctor on_data_stall, data-parallel",
       [](auto& s) {
         s.set_world_size(2);
         s.mutable_doctor()->set_on_data_stall("add_workers");
       },
       kInvalid, "spec.doctor.on_data_stall: the doctor's actions are for single-process jobs"},
      {"doctor threshold unknown", [](auto& s) { (*s.mutable_doctor()->mutable_thresholds())["data_stall"] = 0.3; },
       kInvalid,
       "spec.doctor.thresholds.data_stall: no threshold named \"data_stall\"; expected one of data_stall_warning, "},
      {"doctor threshold share above 1",
       [](auto& s) { (*s.mutable_doctor()->mutable_thresholds())["utilisation_p95"] = 70; }, kInvalid,
       "spec.doctor.thresholds.utilisation_p95: expected a share from 0 to 1, got 70"},
      {"doctor threshold window 0",
       [](auto& s) { (*s.mutable_doctor()->mutable_thresholds())["utilisation_window"] = 0; }, kInvalid,
       "spec.doctor.thresholds.utilisation_window: expected a window, a whole number from 1 to 1000, got 0"},
      {"doctor threshold not finite",
       [](auto& s) {
         (*s.mutable_doctor()->mutable_thresholds())["grad_growth"] = std::numeric_limits<double>::infinity();
       },
       kInvalid, "spec.doctor.thresholds.grad_growth: expected a finite number, got inf"},
      {"doctor threshold name too long",
       [](auto& s) { (*s.mutable_doctor()->mutable_thresholds())[std::string(1000, 'x')] = 1; }, kInvalid,
       "spec.doctor.thresholds: expected a threshold's name (at most 64 characters), got one of 1000 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::JobSpec spec = Minimal();
    c.mutate(spec);
    const auto [code, message] = Refusal(spec);
    EXPECT_EQ(code, c.code) << message;
    EXPECT_THAT(message, HasSubstr(c.message));
    EXPECT_THAT(message, ::testing::Not(HasSubstr(root_.string())));  // no server paths in messages
  }
}

// Thresholds in range are accepted and kept as given (the worker's doctor applies them).
TEST_F(JobSpecTest, DoctorThresholdsInRangeAreKept) {
  v1::JobSpec s = Minimal();
  (*s.mutable_doctor()->mutable_thresholds())["data_stall_warning"] = 0.35;
  (*s.mutable_doctor()->mutable_thresholds())["utilisation_window"] = 20;
  (*s.mutable_doctor()->mutable_thresholds())["fragmentation_min_bytes"] = 1e9;
  const v1::JobSpec v = validate_job_spec(s, ctx_);
  EXPECT_EQ(v.doctor().thresholds().at("data_stall_warning"), 0.35);
  EXPECT_EQ(v.doctor().thresholds().at("utilisation_window"), 20);
  EXPECT_EQ(v.doctor().thresholds().size(), 3u);
}

// A model spec's recurrent layers take "bidirectional" (checked and priced like the rest of
// the spec before anything is built); a value that is not a bool is refused, naming the layer.
TEST_F(JobSpecTest, RecurrentLayersMayBeBidirectional) {
  v1::JobSpec s = Minimal();
  s.clear_model_preset();
  s.set_model_json(R"({"input_shape": [8, 8], "layers": [
      {"type": "lstm", "hidden_size": 16, "num_layers": 2, "bidirectional": true, "return": "sequence"},
      {"type": "gru", "hidden_size": 8, "bidirectional": true}, {"type": "linear", "out_features": 10}]})");
  EXPECT_EQ(Refusal(s).first, grpc::StatusCode::OK) << Refusal(s).second;
  s.set_model_json(R"({"input_shape": [8, 8], "layers": [
      {"type": "gru", "hidden_size": 8, "bidirectional": "yes"}, {"type": "linear", "out_features": 10}]})");
  const auto [code, message] = Refusal(s);
  EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(message, HasSubstr("layer 0 (gru): 'bidirectional' must be true or false"));
}

TEST_F(JobSpecTest, NamesAreRestricted) {
  EXPECT_TRUE(is_valid_name("digits-cnn_v2.1"));
  EXPECT_FALSE(is_valid_name(""));
  EXPECT_FALSE(is_valid_name(".hidden"));
  EXPECT_FALSE(is_valid_name("a/b"));
  EXPECT_FALSE(is_valid_name(std::string(65, 'a')));
}

}  // namespace
}  // namespace anvil::server
