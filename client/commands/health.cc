// `anvil health [-v]`: whether the server is serving (the standard gRPC health protocol,
// which needs no token), and with -v what it runs on.
#include <cstdio>
#include <memory>

#include "client/commands/commands.h"
#include "client/exit_codes.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace anvil::client {
namespace {

int RunHealth(Context& cli, bool verbose) {
  auto health = grpc::health::v1::Health::NewStub(cli.channel);
  grpc::health::v1::HealthCheckResponse resp;
  check(health->Check(cli.call(5).get(), grpc::health::v1::HealthCheckRequest(), &resp), "health");
  const bool serving = resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()).c_str());
  if (verbose) {
    v1::ServerInfo info;
    check(cli.training->GetServerInfo(cli.call(5).get(), v1::GetServerInfoRequest(), &info), "health");
    std::string devices;
    for (const std::string& d : info.devices()) devices += (devices.empty() ? "" : ", ") + d;
    std::printf(
        "version:  %s\ncpu:      %s\nfeatures: %s\nisa:      %s%s\ngemm:     %s\nbf16:     %s\nthreads:  %d (%d CPUs "
        "available)\ndevices:  %s\n",
        info.version().c_str(), info.cpu_model().c_str(), info.cpu_features().c_str(), info.isa().c_str(),
        info.isa() == info.detected_isa()
            ? ""
            : (" (lowered by ANVIL_CPU_ISA; the CPU has " + info.detected_isa() + ")").c_str(),
        info.gemm().c_str(), info.bf16_gemm().c_str(), info.threads(), info.available_cpus(), devices.c_str());
  }
  return serving ? kExitOk : kExitUnavailable;
}

}  // namespace

CommandAction health_command(CLI::App& cmd) {
  auto verbose = std::make_shared<bool>(false);
  cmd.add_flag("-v,--verbose", *verbose, "also print the server's version, CPU, ISA level, GEMM kernel and devices");
  return [verbose](Context& cli) { return RunHealth(cli, *verbose); };
}

}  // namespace anvil::client
