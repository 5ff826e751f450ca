#include "server/tensorboard/event_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/util/error.h"
#include "proto/tensorboard/event.pb.h"
#include "server/tensorboard/crc32c.h"

namespace anvil::server::tensorboard {
namespace {

// The messages (proto/tensorboard/event.proto).
using ::anvil::tensorboard::Event;
using ::anvil::tensorboard::SessionLog;
using ::anvil::tensorboard::Summary;

void PutLittleEndian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::string Host() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "anvild";
  for (char* c = name; *c != '\0'; ++c) {
    if (*c == '/' || *c == '.') *c = '_';  // one path component, and TensorBoard splits on '.'
  }
  return name;
}

}  // namespace

std::string frame_record(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  PutLittleEndian(out, data.size(), 8);
  PutLittleEndian(out, masked_crc32c(std::string_view(out.data(), 8)), 4);
  out += data;
  PutLittleEndian(out, masked_crc32c(data), 4);
  return out;
}

EventFile::EventFile(const std::string& dir, int64_t start_step, double wall_time) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ANVIL_CHECK(!ec, "tensorboard: cannot create ", dir, ": ", ec.message());
  // Files of one second from one process are told apart by a counter; TensorBoard reads a
  // folder's files in name order, which is then creation order.
  static std::atomic<int> counter{0};
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_time)) + "." + Host() + "." +
          std::to_string(getpid()) + "." + std::to_string(counter++);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  ANVIL_CHECK(fd_ >= 0, "tensorboard: cannot create ", path_, ": ", std::strerror(errno));
  Event version;
  version.set_wall_time(wall_time);
  version.set_file_version("brain.Event:2");
  Append(version.SerializeAsString());
  if (start_step > 0) {
    Event start;
    start.set_wall_time(wall_time);
    start.set_step(start_step);
    start.mutable_session_log()->set_status(SessionLog::START);
    Append(start.SerializeAsString());
  }
}

EventFile::~EventFile() {
  if (fd_ < 0) return;
  ::fsync(fd_);
  ::close(fd_);
}

void EventFile::scalars(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values) {
  Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  for (const auto& [tag, value] : values) {
    Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  Append(e.SerializeAsString());
}

void EventFile::flush() {
  ANVIL_CHECK(::fsync(fd_) == 0, "tensorboard: cannot sync ", path_, ": ", std::strerror(errno));
}

void EventFile::Append(const std::string& event_bytes) {
  const std::string record = frame_record(event_bytes);
  // One write per record (O_APPEND): a record is never interleaved, and only the last one of
  // a process that dies can be partial.
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ANVIL_CHECK(n > 0, "tensorboard: cannot write ", path_, ": ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

}  // namespace anvil::server::tensorboard
