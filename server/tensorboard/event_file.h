// A job's scalar curves as TensorBoard event files, so `tensorboard --logdir <data>/jobs`
// shows every job: one file per run of a job under jobs/<id>/tensorboard/ (a job resumed
// after a restart starts a new file, opened with a SessionLog START at its first step, so
// TensorBoard drops the replayed steps of the run before). Each Event
// (proto/tensorboard/event.proto) is one TFRecord: its length (uint64, little-endian), the
// masked CRC-32C of those 8 bytes, the serialized Event, the masked CRC-32C of the Event.
//
// Records go to the file as they come (one write each, appended), so a process that dies
// leaves every earlier record whole, and at most a partial last one, which TensorBoard's
// reader stops at. flush() makes them durable (fsync), at epoch ends and at close.
// Thread-safety: none; one job's events come from one worker thread, which alone writes that
// job's file (the scheduler's map of files has its own lock).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace anvil::server::tensorboard {

// One TFRecord around `data`.
std::string frame_record(const std::string& data);

class EventFile {
 public:
  // Creates `dir` if needed and a new file in it named as TensorBoard expects
  // (events.out.tfevents.<seconds>.<host>.<pid>.<n>); writes the file_version event and,
  // when `start_step` > 0, the SessionLog START. Throws anvil::Error if the file cannot be made.
  EventFile(const std::string& dir, int64_t start_step, double wall_time);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  // One Summary event of scalar values at `step`. Throws anvil::Error when the write fails.
  void scalars(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void Append(const std::string& event_bytes);
  std::string path_;
  int fd_ = -1;
};

}  // namespace anvil::server::tensorboard
