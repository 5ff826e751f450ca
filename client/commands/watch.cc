#include "client/commands/watch.h"

#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "client/commands/commands.h"
#include "client/exit_codes.h"
#include "client/progress.h"

namespace anvil::client {

v1::JobState follow_job(Context& cli, const std::string& id, int64_t from_step) {
  Progress progress(isatty(STDOUT_FILENO) && !cli.json);
  int64_t next_step = from_step, last_seq = 0;
  int retries = 0;
  while (true) {
    auto ctx = cli.call(0);
    v1::StreamMetricsRequest req;
    req.set_job_id(id);
    req.set_from_step(next_step);
    auto reader = cli.training->StreamMetrics(ctx.get(), req);
    v1::MetricEvent e;
    v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
    while (reader->Read(&e)) {
      retries = 0;
      if (e.seq() <= last_seq) continue;  // a reconnect replays the job's state events
      last_seq = e.seq();
      if (cli.json) {
        std::string line;
        google::protobuf::util::JsonPrintOptions o;
        o.preserve_proto_field_names = true;
        (void)google::protobuf::util::MessageToJsonString(e, &line, o);
        std::printf("%s\n", line.c_str());
      } else {
        std::fputs(progress.update(e).c_str(), stdout);
      }
      std::fflush(stdout);
      if (e.has_step_metrics() || e.has_epoch_metrics()) next_step = std::max(next_step, e.step() + 1);
      if (e.event_case() == v1::MetricEvent::kState) last_state = e.state();
    }
    const grpc::Status st = reader->Finish();
    if (st.ok() && (last_state == v1::SUCCEEDED || last_state == v1::FAILED || last_state == v1::CANCELLED)) {
      std::fputs(progress.finish().c_str(), stdout);
      return last_state;
    }
    if (!st.ok() && st.error_code() != grpc::StatusCode::UNAVAILABLE) check(st, "watch " + id);
    if (++retries > 60) {
      throw Failure(kExitUnavailable, "watch " + id + ": gave up reconnecting (" +
                                          (st.ok() ? "the stream ended early" : st.error_message()) + ")");
    }
    std::fputs(progress.finish().c_str(), stdout);
    std::fprintf(stderr, "stream interrupted (%s); reconnecting from step %lld...\n", st.error_message().c_str(),
                 static_cast<long long>(next_step));
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

CommandAction watch_command(CLI::App& cmd) {
  auto id = std::make_shared<std::string>();
  auto from_step = std::make_shared<int64_t>(0);
  cmd.add_option("id", *id)->required();
  cmd.add_option("--from-step", *from_step, "replay from this step");
  return [id, from_step](Context& cli) {
    return follow_job(cli, *id, *from_step) == v1::SUCCEEDED ? kExitOk : kExitJobDidNotSucceed;
  };
}

}  // namespace anvil::client
