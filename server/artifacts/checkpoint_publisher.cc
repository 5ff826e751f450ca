// Publishing checkpoints off the training thread: see checkpoint_publisher.h.
#include "server/artifacts/checkpoint_publisher.h"

#include <unistd.h>

#include <cerrno>

#include "core/util/file.h"
#include "server/artifacts/job_checkpoints.h"
#include "server/log.h"

namespace anvil::server {

CheckpointPublisher::CheckpointPublisher(ArtifactStore& store) : store_(store), thread_([this] { Run(); }) {}

CheckpointPublisher::~CheckpointPublisher() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    for (const Pending& p : queue_) ::unlink(p.staged.c_str());
    queue_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointPublisher::set_named(const std::string& job_id, const std::string& key) {
  MutexLock lock(&mu_);
  named_[job_id] = key;
}

void CheckpointPublisher::submit(const std::string& job_id, int64_t epoch, int64_t step, const std::string& path) {
  // The start-up sweep removes a staged link a crash leaves behind (temporary_suffix()).
  const std::string staged = path + temporary_suffix();
  if (::link(path.c_str(), staged.c_str()) != 0) {
    log(LogLevel::kWarning, "job ", job_id, ": the checkpoint at step ", step, " cannot be staged for publishing (",
        errno_message(errno), "); the job resumes from an earlier one");
    return;
  }
  MutexLock lock(&mu_);
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->job_id == job_id) {  // superseded
      ::unlink(it->staged.c_str());
      queue_.erase(it);
      break;
    }
  }
  queue_.push_back(Pending{job_id, staged, epoch, step});
  cv_.notify_all();
}

std::string CheckpointPublisher::take_published(const std::string& job_id) {
  MutexLock lock(&mu_);
  const auto it = published_.find(job_id);
  if (it == published_.end()) return "";
  std::string key = std::move(it->second);
  published_.erase(it);
  named_[job_id] = key;  // the caller's row names it from now on
  return key;
}

std::string CheckpointPublisher::flush(const std::string& job_id) {
  Wait(job_id);
  return take_published(job_id);
}

std::string CheckpointPublisher::flush_newest(const std::string& job_id) {
  Wait(job_id);
  MutexLock lock(&mu_);
  if (const auto it = published_.find(job_id); it != published_.end()) return it->second;
  const auto it = named_.find(job_id);
  return it == named_.end() ? "" : it->second;
}

bool CheckpointPublisher::BusyLocked(const std::string& job_id) const {
  if (in_flight_ == job_id) return true;
  for (const Pending& p : queue_) {
    if (p.job_id == job_id) return true;
  }
  return false;
}

void CheckpointPublisher::Wait(const std::string& job_id) {
  UniqueMutexLock lock(&mu_);
  while (!stopping_ && BusyLocked(job_id)) cv_.wait(lock.native());
}

void CheckpointPublisher::forget(const std::string& job_id) {
  MutexLock lock(&mu_);
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->job_id == job_id) {
      ::unlink(it->staged.c_str());
      queue_.erase(it);
      break;
    }
  }
  published_.erase(job_id);
  named_.erase(job_id);
  if (in_flight_ == job_id) forgot_in_flight_ = true;
}

void CheckpointPublisher::Run() {
  UniqueMutexLock lock(&mu_);
  for (;;) {
    while (!stopping_ && queue_.empty()) cv_.wait(lock.native());
    if (queue_.empty()) return;  // stopping
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    in_flight_ = p.job_id;
    // The row names at most the key handed out last (or, not yet taken, the one before this).
    const auto named = named_.find(p.job_id);
    const std::string keep = named == named_.end() ? "" : named->second;
    lock.unlock();
    std::string key;
    try {
      key = publish_checkpoint(store_, p.job_id, p.epoch, p.step, p.staged, 2, keep);
    } catch (const std::exception& e) {
      log(LogLevel::kWarning, "job ", p.job_id, ": the checkpoint at step ", p.step,
          " was not published (the job would resume from an earlier one): ", e.what());
    }
    ::unlink(p.staged.c_str());
    lock.lock();
    in_flight_.clear();
    if (!key.empty() && !forgot_in_flight_) published_[p.job_id] = key;
    forgot_in_flight_ = false;
    cv_.notify_all();
  }
}

}  // namespace anvil::server
