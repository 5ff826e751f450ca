// `anvil export NAME[:VERSION] -o FILE`: a model file downloaded in one of three formats,
// written under FILE.part and renamed only once its size and SHA-256 match the server's.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "client/commands/commands.h"
#include "client/commands/model_ref.h"
#include "client/exit_codes.h"
#include "core/util/sha256.h"

namespace anvil::client {
namespace {

struct ExportArgs {
  std::string model_ref, out_path, format = "native";
  int opset = 0;
  std::vector<std::string> dynamic_axes;
  bool fold_batch_norm = false, verify = false;
};

int RunExport(Context& cli, const ExportArgs& a) {
  const ModelRef ref = parse_model_ref(a.model_ref);
  v1::ExportRequest req;
  req.set_model(ref.name);
  req.set_version(ref.version);
  req.set_format(a.format == "native" ? v1::NATIVE : a.format == "safetensors" ? v1::SAFETENSORS : v1::ONNX);
  if ((a.opset != 0 || !a.dynamic_axes.empty() || a.verify || a.fold_batch_norm) && a.format != "onnx") {
    throw Failure(kExitBadInput, "--opset, --dynamic-axis, --verify and --fold-batch-norm apply to --format onnx only");
  }
  req.set_fold_batch_norm(a.fold_batch_norm);
  req.set_opset(a.opset);
  req.set_verify(a.verify);
  for (const std::string& axis : a.dynamic_axes) req.add_dynamic_axes(axis);
  auto ctx = cli.call(600);
  auto reader = cli.serving->Export(ctx.get(), req);
  const std::string tmp = a.out_path + ".part";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw Failure(kExitFailed, "cannot write \"" + tmp + "\": " + std::strerror(errno));
  v1::ExportChunk c;
  int64_t total = 0, announced = -1;
  std::string sha, verification;
  // Verified by hashing the file as written (read back from disk), not the bytes received.
  while (reader->Read(&c)) {
    out.write(c.data().data(), static_cast<std::streamsize>(c.data().size()));
    total += static_cast<int64_t>(c.data().size());
    if (!c.sha256().empty()) {
      sha = c.sha256();
      announced = c.total_bytes();
      verification = c.verification();
    }
  }
  out.close();
  const bool written = static_cast<bool>(out);  // a full disk fails the writes or the close
  const grpc::Status st = reader->Finish();
  if (!st.ok()) std::remove(tmp.c_str());
  check(st, "export " + a.model_ref);
  if (!written) {
    std::remove(tmp.c_str());
    throw Failure(kExitFailed, "cannot write \"" + tmp + "\": " + std::strerror(errno));
  }
  if (announced != total) {
    std::remove(tmp.c_str());
    throw Failure(kExitChecksumMismatch,
                  "export: received " + std::to_string(total) + " bytes, the server sent " + std::to_string(announced));
  }
  const std::string local = sha256_file_hex(tmp);
  if (local != sha) {
    std::remove(tmp.c_str());
    throw Failure(kExitChecksumMismatch, "export: SHA-256 mismatch (server " + sha + ", received " + local + ")");
  }
  if (std::rename(tmp.c_str(), a.out_path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Failure(kExitFailed, "cannot rename \"" + tmp + "\" to \"" + a.out_path + "\": " + why);
  }
  std::printf("wrote %s (%lld bytes, sha256 %s)\n", a.out_path.c_str(), static_cast<long long>(total), sha.c_str());
  if (!verification.empty()) std::printf("verified in %s\n", verification.c_str());
  return 0;
}

}  // namespace

CommandAction export_command(CLI::App& cmd) {
  auto a = std::make_shared<ExportArgs>();
  cmd.add_option("model", a->model_ref, "NAME[:VERSION]")->required();
  cmd.add_option("--format", a->format, "native, safetensors or onnx")
      ->check(CLI::IsMember({"native", "safetensors", "onnx"}));
  cmd.add_option("-o,--output", a->out_path, "file to write")->required();
  cmd.add_option("--opset", a->opset, "ONNX: the opset (13 to 17; default 17)")->check(CLI::Range(13, 17));
  cmd.add_option("--dynamic-axis", a->dynamic_axes,
                 "ONNX: a symbolic axis beyond the batch, INPUT:DIM=NAME (e.g. input:1=seq); repeatable");
  cmd.add_flag("--fold-batch-norm", a->fold_batch_norm,
               "ONNX: fold each batch norm into the convolution or linear layer before it");
  cmd.add_flag("--verify", a->verify,
               "ONNX: the server runs the file in a second runtime (OpenCV DNN) before sending it and refuses "
               "one that disagrees with the model");
  return [a](Context& cli) { return RunExport(cli, *a); };
}

}  // namespace anvil::client
