// Data-parallel jobs spread over replicas: see job_span.h.
#include "server/job_span.h"

#include <absl/strings/str_cat.h>

#include <filesystem>
#include <stdexcept>

#include "core/train/checkpoint.h"
#include "server/artifacts/job_checkpoints.h"
#include "server/store_retry.h"

namespace anvil::server {
namespace {

namespace fs = std::filesystem;

bool HasLocalCheckpoints(const std::string& job_dir) {
  return !train::existing_checkpoints((fs::path(job_dir) / "checkpoint.safetensors").string(), 2).empty();
}

}  // namespace

int span_node_size(int world, int rank_slots) {
  if (rank_slots <= 0 || world <= rank_slots) return world;
  for (int n = rank_slots; n > 1; --n) {
    if (world % n == 0) return n;
  }
  return 1;
}

std::string part_run_id(const JobPart& part) { return absl::StrCat(part.job_id, "/node-", part.node); }

workers::RunJob::Span coordinator_span(const SpanSettings& settings, Store& store, ArtifactStore& artifacts,
                                       CheckpointPublisher& publisher, const JobRow& row, const std::string& job_dir,
                                       int world, int nproc) {
  workers::RunJob::Span span;
  span.nproc = nproc;
  span.nnodes = world / nproc;
  span.node = 0;
  span.rdzv_url = settings.rendezvous_url;
  span.rdzv_id = absl::StrCat(row.id, "-e", row.lease_epoch);
  span.ifname = settings.ifname;
  span.rendezvous_timeout_s = settings.rendezvous_timeout_s;
  const std::string id = row.id;
  const int64_t epoch = row.lease_epoch;
  const int nnodes = span.nnodes;
  const std::chrono::milliseconds wait = settings.outage_wait;
  span.open_attempt = [&store, &artifacts, &publisher, id, epoch, job_dir, wait, nnodes, nproc](int attempt) {
    // The checkpoint every node resumes from: the job's newest published one (once what the
    // attempt before wrote is published), placed as node 0's newest too, so that node 0 never
    // resumes from a local checkpoint the other nodes cannot have.
    std::string key = publisher.flush_newest(id);
    if (parse_checkpoint_key(key)) {
      key = retry_while_artifacts_unavailable("bring the checkpoint of job " + id, wait,
                                              [&] { return place_checkpoint(artifacts, id, key, job_dir); });
    } else {
      key.clear();
    }
    if (key.empty() && HasLocalCheckpoints(job_dir)) {
      throw std::runtime_error(
          "the job's checkpoint could not be published to the artifact store, so its other nodes cannot resume "
          "from it");
    }
    const bool opened = retry_while_unavailable(
        "open the nodes of job " + id, wait, [&] { return store.open_parts(id, epoch, attempt, nnodes, nproc, key); });
    if (!opened) throw std::runtime_error("the job's lease moved to another replica");
  };
  span.trouble = [&store, id, grace = settings.lease_grace.count()](int attempt) -> std::string {
    std::vector<JobPart> parts;
    try {
      parts = store.parts(id, grace);
    } catch (const std::exception&) {
      return "";  // the store is away: the lease keeper decides about the job
    }
    for (const JobPart& p : parts) {
      if (p.attempt != attempt) continue;
      if (p.state == "failed") {
        return absl::StrCat("node ", p.node, " on replica ", p.owner, " failed: ", p.reason);
      }
      if (p.lapsed) return absl::StrCat("node ", p.node, "'s replica ", p.owner, " stopped renewing its lease");
    }
    return "";
  };
  return span;
}

workers::RunJob part_run(const SpanSettings& settings, ArtifactStore& artifacts, const JobPart& part, const JobRow& job,
                         const v1::JobSpec& spec, const std::string& dir) {
  workers::RunJob run;
  run.job_id = part_run_id(part);
  run.spec = spec;
  run.job_dir = dir;
  run.span.nnodes = part.nnodes;
  run.span.node = part.node;
  run.span.nproc = part.nproc;
  run.span.first_attempt = part.attempt;
  run.span.rdzv_url = settings.rendezvous_url;
  run.span.rdzv_id = absl::StrCat(job.id, "-e", part.epoch);
  run.span.ifname = settings.ifname;
  run.span.rendezvous_timeout_s = settings.rendezvous_timeout_s;
  run.prepare = [&artifacts, part, dir, wait = settings.outage_wait]() -> absl::StatusOr<workers::RunJob::Prepared> {
    std::error_code ec;
    fs::remove_all(dir, ec);  // a node starts from its part's checkpoint only
    fs::create_directories(dir, ec);
    workers::RunJob::Prepared ready;
    if (part.checkpoint.empty()) return ready;
    std::string placed;
    try {
      placed = retry_while_artifacts_unavailable("bring the checkpoint of job " + part.job_id, wait, [&] {
        return place_checkpoint(artifacts, part.job_id, part.checkpoint, dir);
      });
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("its checkpoint could not be brought: ", e.what()));
    }
    if (placed != part.checkpoint) {
      return absl::DataLossError(absl::StrCat("its checkpoint ", part.checkpoint, " is corrupt or missing"));
    }
    ready.resume = true;
    return ready;
  };
  return run;
}

}  // namespace anvil::server
