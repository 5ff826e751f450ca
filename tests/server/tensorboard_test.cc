// TensorBoard event files: the CRC-32C against published check values, and a file read back
// record by record with the framing checked (lengths, both CRCs) and each Event parsed. The
// tensorboard package's own reader checks a real job's files in tensorboard_test.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "proto/tensorboard/event.pb.h"
#include "server/tensorboard/crc32c.h"
#include "server/tensorboard/event_file.h"

namespace anvil::server::tensorboard {
namespace {

// The messages (proto/tensorboard/event.proto).
using ::anvil::tensorboard::Event;
using ::anvil::tensorboard::SessionLog;
using ::anvil::tensorboard::Summary;

namespace fs = std::filesystem;

TEST(Crc32c, MatchesThePublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the CRC catalogue's check value for CRC-32C
  EXPECT_EQ(crc32c(""), 0u);
  // RFC 3720 (iSCSI), B.4: 32 bytes of zeros, of ones, and 0x00..0x1F.
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
}

uint64_t ReadLittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Every record of the file, each checked against its length and both masked CRCs.
std::vector<Event> ReadEvents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 16u) << "a truncated record at byte " << at;
    if (bytes.size() - at < 16) break;
    const uint64_t length = ReadLittleEndian(bytes, at, 8);
    EXPECT_EQ(ReadLittleEndian(bytes, at + 8, 4), masked_crc32c(std::string_view(bytes.data() + at, 8)));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(ReadLittleEndian(bytes, at + 12 + length, 4), masked_crc32c(data));
    Event e;
    EXPECT_TRUE(e.ParseFromString(data));
    events.push_back(e);
    at += 16 + length;
  }
  return events;
}

class EventFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("anvil-tb-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(EventFileTest, ScalarsAreFramedEventsAfterTheFileVersion) {
  std::string path;
  {
    EventFile f(dir_.string(), 0, 1700000000.25);
    path = f.path();
    f.scalars(10, 1700000001.0, {{"train/loss", 0.5}, {"train/learning_rate", 1e-3}});
    f.scalars(20, 1700000002.0, {{"train/loss", 0.25}});
    f.flush();
  }
  EXPECT_EQ(fs::path(path).parent_path(), dir_);
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.1700000000.", 0), 0u) << path;
  const std::vector<Event> events = ReadEvents(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_DOUBLE_EQ(events[0].wall_time(), 1700000000.25);
  EXPECT_EQ(events[1].step(), 10);
  ASSERT_EQ(events[1].summary().value_size(), 2);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 0.5f);
  EXPECT_FLOAT_EQ(events[1].summary().value(1).simple_value(), 1e-3f);
  EXPECT_EQ(events[2].step(), 20);
  EXPECT_FLOAT_EQ(events[2].summary().value(0).simple_value(), 0.25f);
}

TEST_F(EventFileTest, AResumedRunStartsANewFileWithASessionStart) {
  std::string first, second;
  {
    EventFile a(dir_.string(), 0, 1700000000.0);
    first = a.path();
    a.scalars(5, 1700000000.5, {{"train/loss", 1.0}});
  }
  {
    EventFile b(dir_.string(), 40, 1700000000.0);  // same second: told apart, ordered by name
    second = b.path();
  }
  EXPECT_NE(first, second);
  EXPECT_LT(first, second);
  const std::vector<Event> events = ReadEvents(second);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].session_log().status(), SessionLog::START);
  EXPECT_EQ(events[1].step(), 40);
}

TEST_F(EventFileTest, AnUncreatableFolderIsAClearError) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  EXPECT_THROW(EventFile((dir_ / "file" / "tensorboard").string(), 0, 0), std::exception);
}

}  // namespace
}  // namespace anvil::server::tensorboard
