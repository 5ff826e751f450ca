// The model registry's subcommands: models (the list), models add (an ONNX file), model.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "client/commands/commands.h"
#include "client/commands/model_ref.h"
#include "client/commands/print.h"
#include "client/exit_codes.h"
#include "core/util/sha256.h"

namespace anvil::client {
namespace {

struct AddArgs {
  std::string name, file;
  std::vector<std::string> labels;
};

int RunModelsAdd(Context& cli, const AddArgs& a) {
  std::ifstream in(a.file, std::ios::binary);
  if (!in) throw Failure(kExitBadInput, "cannot read \"" + a.file + "\": " + std::strerror(errno));
  auto ctx = cli.call(600);
  v1::Model model;
  auto writer = cli.serving->RegisterModel(ctx.get(), &model);
  v1::RegisterModelChunk c;
  c.set_name(a.name);
  for (const std::string& l : a.labels) c.add_labels(l);
  std::string buffer(1 << 20, '\0');
  anvil::Sha256 hash;
  bool sent = true;
  while (sent && in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.bad()) {
      // A read error partway: the upload is abandoned, never finished with the hash of a
      // truncated file (which the server would accept as whole).
      const std::string why = std::strerror(errno);
      ctx->TryCancel();
      throw Failure(kExitFailed, "cannot read \"" + a.file + "\" to its end: " + why + "; nothing was registered");
    }
    const auto n = static_cast<size_t>(in.gcount());
    hash.update(buffer.data(), n);
    c.set_data(buffer.data(), n);
    if (!in) c.set_sha256(hash.hex_digest());  // the last piece carries the whole file's hash
    sent = writer->Write(c);
    c.Clear();
  }
  writer->WritesDone();
  check(writer->Finish(), "models add " + a.name);
  if (cli.json) {
    std::printf("%s\n", to_json(model).c_str());
  } else {
    print_model_summary(model);
  }
  return 0;
}

int RunModels(Context& cli) {
  v1::ListModelsResponse resp;
  v1::ListModelsRequest req;
  req.set_page_size(1000);
  while (true) {
    v1::ListModelsResponse page;
    check(cli.serving->ListModels(cli.call().get(), req, &page), "models");
    for (v1::Model& m : *page.mutable_models()) *resp.add_models() = std::move(m);
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  if (cli.json) {
    std::printf("%s\n", to_json(resp).c_str());
  } else {
    for (const v1::Model& m : resp.models()) {
      // A model registered from an ONNX file has no job.
      const std::string origin = m.job_id().empty() ? "imported" : "job " + m.job_id();
      const std::string ref = m.name() + ":" + std::to_string(m.version());
      if (m.device().empty()) {
        // The server lists a version it could not describe (its archive unreadable or
        // corrupt) without a signature: said, not shown as a model of 0 parameters.
        std::printf("%s  %s  unreadable (`anvil model %s` says why)\n", ref.c_str(), origin.c_str(), ref.c_str());
        continue;
      }
      std::printf("%s  %s  %s  %lld parameters\n", ref.c_str(), origin.c_str(),
                  m.precision().empty() ? "fp32" : m.precision().c_str(), static_cast<long long>(m.parameters()));
    }
    if (resp.models_size() == 0) std::printf("no models\n");
  }
  return 0;
}

int RunModel(Context& cli, const std::string& model_ref) {
  const ModelRef ref = parse_model_ref(model_ref);
  v1::GetModelRequest req;
  req.set_name(ref.name);
  req.set_version(ref.version);
  v1::Model resp;
  check(cli.serving->GetModel(cli.call().get(), req, &resp), "model " + model_ref);
  if (cli.json)
    std::printf("%s\n", to_json(resp).c_str());
  else
    print_model_summary(resp);
  return 0;
}

}  // namespace

CommandAction models_command(CLI::App& cmd) {
  CLI::App* add = cmd.add_subcommand("add", "register an ONNX file trained elsewhere as the model's next version");
  auto a = std::make_shared<AddArgs>();
  add->add_option("name", a->name, "the model's name")->required();
  add->add_option("file", a->file, "the .onnx file")->required();
  add->add_option("--label", a->labels, "class names in class order (repeatable); default: the file's own");
  return [add, a](Context& cli) { return add->parsed() ? RunModelsAdd(cli, *a) : RunModels(cli); };
}

CommandAction model_command(CLI::App& cmd) {
  auto model_ref = std::make_shared<std::string>();
  cmd.add_option("model", *model_ref, "NAME[:VERSION]")->required();
  return [model_ref](Context& cli) { return RunModel(cli, *model_ref); };
}

}  // namespace anvil::client
