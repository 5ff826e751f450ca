// Data-parallel jobs spread over replicas (docs/replicas.md "Data-parallel jobs across
// replicas"). A replica started with --rank-slots N runs at most N ranks of one job; a job of
// world size W > N runs as W / n nodes of n ranks (n the largest divisor of W not above N).
// The replica that claims the job runs node 0 (rank 0: events, checkpoints, the model archive)
// and, before each rendezvous attempt, opens nodes 1.. as JobPart rows naming the published
// checkpoint every node resumes from; other replicas claim them into idle CPU workers. The
// ranks meet in the job store (workers/pg_rendezvous.h) under "JOB-eEPOCH", so a run after a
// takeover never meets keys of the run before it. A node whose replica dies or fails ends the
// attempt; node 0 restarts it (spec.max_restarts) and any replica left takes the new nodes.
//
// Thread-safety: free functions; the closures they return are called on the worker's thread
// and use only thread-safe objects (the store, the artifact store, the publisher).
#pragma once

#include <chrono>
#include <string>

#include "server/artifacts/artifact_store.h"
#include "server/artifacts/checkpoint_publisher.h"
#include "server/store.h"
#include "workers/worker.h"

namespace anvil::server {

struct SpanSettings {
  int rank_slots = 0;            // ranks of one job on this replica; 0 = every rank here
  std::string rendezvous_url;    // the job store's URL (PostgreSQL)
  std::string ifname = "lo";     // the interface the ranks of different replicas reach each other on
  int rendezvous_timeout_s = 0;  // how long ranks wait for the other nodes; 0 = the ranks' default
  std::chrono::milliseconds lease_grace{std::chrono::seconds(2)};
  std::chrono::milliseconds outage_wait{std::chrono::seconds(60)};
};

// The ranks per node for a job of `world` ranks with `rank_slots` per replica: `world` when it
// fits (or rank_slots is 0), else the largest divisor of `world` not above rank_slots.
int span_node_size(int world, int rank_slots);

// Node 0's span for `row`, claimed here under its lease epoch: `world` ranks in nodes of `nproc`.
workers::RunJob::Span coordinator_span(const SpanSettings& settings, Store& store, ArtifactStore& artifacts,
                                       CheckpointPublisher& publisher, const JobRow& row, const std::string& job_dir,
                                       int world, int nproc);

// The worker's run of a part claimed here: `job` is the part's job row (its spec), `dir` the
// folder its ranks use on this replica. Its prepare brings the part's checkpoint from the
// artifact store (a node never resumes from anything else).
workers::RunJob part_run(const SpanSettings& settings, ArtifactStore& artifacts, const JobPart& part, const JobRow& job,
                         const v1::JobSpec& spec, const std::string& dir);

// The id a part's worker events and slot carry: "JOB/node-N".
std::string part_run_id(const JobPart& part);

}  // namespace anvil::server
