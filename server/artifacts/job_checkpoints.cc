// A job's checkpoints in the artifact store: see job_checkpoints.h.
#include "server/artifacts/job_checkpoints.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <tuple>
#include <vector>

#include "core/train/checkpoint.h"
#include "core/util/clock.h"
#include "server/artifacts/digest.h"

namespace fs = std::filesystem;

namespace anvil::server {
namespace {

std::string Prefix(const std::string& job_id) { return "jobs/" + job_id + "/checkpoints/"; }

// The job's published checkpoints, newest first: by lease epoch, then step, then time. A
// later epoch is newer whatever its step: a replica cut off from the job may have gone on to
// higher steps under its old epoch, which its successor never resumed from.
std::vector<std::pair<CheckpointKey, std::string>> Published(ArtifactStore& store, const std::string& job_id) {
  std::vector<std::pair<CheckpointKey, std::string>> found;
  for (const std::string& key : store.list(Prefix(job_id))) {
    if (const std::optional<CheckpointKey> k = parse_checkpoint_key(key)) found.emplace_back(*k, key);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    const CheckpointKey &x = a.first, &y = b.first;
    return std::tie(x.epoch, x.step, x.time_ms) > std::tie(y.epoch, y.step, y.time_ms);
  });
  return found;
}

}  // namespace

std::string checkpoint_key(const std::string& job_id, const CheckpointKey& k) {
  return Prefix(job_id) + "e" + std::to_string(k.epoch) + "-s" + std::to_string(k.step) + "-t" +
         std::to_string(k.time_ms) + ".safetensors";
}

std::optional<CheckpointKey> parse_checkpoint_key(const std::string& key) {
  const size_t slash = key.rfind('/');
  if (slash == std::string::npos || key.find("/checkpoints/") == std::string::npos) return std::nullopt;
  const std::string name = key.substr(slash + 1);
  CheckpointKey k;
  char tail[16] = {0};
  long long epoch = 0, step = 0, time_ms = 0;
  if (std::sscanf(name.c_str(), "e%lld-s%lld-t%lld.%15s", &epoch, &step, &time_ms, tail) != 4 ||
      std::string(tail) != "safetensors" ||
      checkpoint_key("x", {epoch, step, time_ms}) != "jobs/x/checkpoints/" + name) {
    return std::nullopt;
  }
  k.epoch = epoch;
  k.step = step;
  k.time_ms = time_ms;
  return k;
}

std::string publish_checkpoint(ArtifactStore& store, const std::string& job_id, int64_t epoch, int64_t step,
                               const std::string& local_path, int keep, const std::string& protect) {
  const std::string key = checkpoint_key(job_id, {epoch, step, unix_millis()});
  store.publish(key, local_path);
  try {
    // Never a later epoch's: a publisher whose lease moved on must not touch its successor's.
    const auto published = Published(store, job_id);
    for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < published.size(); ++i) {
      if (published[i].second != key && published[i].second != protect && published[i].first.epoch <= epoch) {
        store.remove(published[i].second);
      }
    }
  } catch (const ArtifactError&) {
    // Pruning is housekeeping: the next checkpoint prunes again.
  }
  return key;
}

std::string place_checkpoint(ArtifactStore& store, const std::string& job_id, const std::string& key,
                             const std::string& job_dir, int keep) {
  const std::string newest = (fs::path(job_dir) / "checkpoint.safetensors").string();
  std::error_code ec;
  fs::create_directories(job_dir, ec);
  // Whether `candidate` is now the newest local checkpoint.
  auto place = [&](const std::string& candidate) {
    const std::optional<ArtifactInfo> info = store.stat(candidate);
    if (!info) return false;
    if (!info->sha256.empty() && fs::exists(newest, ec) && sha256_file(newest) == info->sha256) return true;
    const std::string incoming = newest + ".incoming";
    try {
      store.fetch_to(candidate, incoming);
    } catch (const ArtifactError& e) {
      // Corrupt or gone: an older one. Anything else (unreachable, a full disk) is the caller's.
      if (e.kind() != ArtifactError::Kind::kCorrupt && e.kind() != ArtifactError::Kind::kNotFound) throw;
      return false;
    }
    // The local files become fallback generations; the published bytes the newest.
    train::rotate_checkpoints(newest, keep);
    fs::rename(incoming, newest);
    return true;
  };
  if (!key.empty() && place(key)) return key;
  // The row's checkpoint is corrupt or gone (pruned while the row still named it): the job's
  // other published ones, the latest lease's first. Each is a state of this job; the epoch-first
  // order keeps a cut-off replica's late, higher steps behind its successor's.
  for (const auto& [k, other] : Published(store, job_id)) {
    if (other != key && place(other)) return other;
  }
  return "";
}

void remove_job_artifacts(ArtifactStore& store, const std::string& job_id, const std::string& keep_key) {
  for (const std::string& key : store.list("jobs/" + job_id + "/")) {
    if (key != keep_key) store.remove(key);
  }
}

}  // namespace anvil::server
