// A job's checkpoints in the artifact store, so that any replica can resume the job.
//
// The worker writes checkpoints into the job's local folder (JOB_DIR/checkpoint.safetensors,
// older generations beside it). Each one is then published under a key of its own,
//   jobs/JOB/checkpoints/e<EPOCH>-s<STEP>-t<UNIX_MS>.safetensors,
// EPOCH being the lease under which it was written (the time tells apart two checkpoints of
// one step, an epoch's end and a periodic one): a replica cut off from the job writes only
// keys of its own epoch, which nothing reads once its lease moved on (the job's row, written
// under the fence, names the published checkpoint to resume from). The two newest are kept.
//
// Thread-safety: free functions; they share nothing beyond the store (thread-safe).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "server/artifacts/artifact_store.h"

namespace anvil::server {

struct CheckpointKey {
  int64_t epoch = 0, step = 0, time_ms = 0;
};

std::string checkpoint_key(const std::string& job_id, const CheckpointKey& k);
// The epoch and step a published checkpoint's key names; nullopt for anything else (the local
// paths rows held before checkpoints were published, "jobs/JOB/checkpoint.safetensors").
std::optional<CheckpointKey> parse_checkpoint_key(const std::string& key);

// Publishes the checkpoint at `local_path` and removes the job's published checkpoints older
// than the newest `keep` (best effort), never `protect` (the one the job's row names: a
// replica that dies before its row names a newer one resumes from it). Returns its key.
std::string publish_checkpoint(ArtifactStore& store, const std::string& job_id, int64_t epoch, int64_t step,
                               const std::string& local_path, int keep = 2, const std::string& protect = "");

// Makes JOB_DIR/checkpoint.safetensors hold the published checkpoint `key`, checked against
// its SHA-256: nothing to do when it already does (the same replica resuming), else the local
// generations rotate (kept as fallbacks) and the published bytes take the newest place. When
// `key` is corrupt or missing, the job's other published checkpoints are tried, the latest
// lease epoch's first.
// Returns the key placed, or "" when none could be (the run starts from the local files, if any).
// Throws ArtifactError kUnavailable when the store cannot be reached.
std::string place_checkpoint(ArtifactStore& store, const std::string& job_id, const std::string& key,
                             const std::string& job_dir, int keep = 2);

// Removes every published artifact of the job except `keep_key` ("" = none).
void remove_job_artifacts(ArtifactStore& store, const std::string& job_id, const std::string& keep_key);

}  // namespace anvil::server
