// The artifact store, both engines: a folder and an S3-compatible server (moto's, started by
// the suite on loopback). Every contract test runs against each: publish and load round trips
// with the SHA-256 computed independently here, objects written once, corruption and a wrong
// expected digest refused as kCorrupt, missing keys, listings that never show temporaries,
// removal, keys that try to leave the store, and an S3 endpoint that does not answer.
#include "server/artifacts/artifact_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "core/util/file.h"
#include "core/util/sha256.h"
#include "server/artifacts/checkpoint_publisher.h"
#include "server/artifacts/digest.h"
#include "server/artifacts/file_artifacts.h"
#include "server/artifacts/job_checkpoints.h"
#include "server/artifacts/s3_artifacts.h"
#include "tests/fixtures/s3_server.h"
#include "tests/paths.h"

namespace anvil::server {
namespace {

namespace fs = std::filesystem;

// The kind of the ArtifactError that f throws (a test failure when it throws nothing else).
ArtifactError::Kind KindOf(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const ArtifactError& e) {
    if (message != nullptr) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "expected an ArtifactError";
  return ArtifactError::Kind::kOther;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class ArtifactStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    if (test::S3Server::Available(test::PeerPython())) {
      test::S3Server::Options o;
      o.python = test::PeerPython();
      s3_ = new test::S3Server(o);
    }
  }
  static void TearDownTestSuite() {
    delete s3_;
    s3_ = nullptr;
  }

  void SetUp() override {
    char tmpl[] = "/tmp/anvil-artifacts-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    if (GetParam() == "file") {
      store_ = std::make_unique<FileArtifactStore>((dir_ / "store").string());
    } else {
      if (s3_ == nullptr) GTEST_SKIP() << "no moto server in " << test::PeerPython() << " (make test-peers)";
      S3Location where;
      where.endpoint = s3_->endpoint();
      where.bucket = s3_->bucket();
      // A prefix of the test's own: the suite shares one server.
      where.prefix = "t" + std::to_string(++counter_) + "/";
      where.access_key = "testing";
      where.secret_key = "testing";
      where.timeout_s = 20;
      where.list_page_size = 2;  // listings of more keys than that take several pages
      prefix_ = where.prefix;
      store_ = std::make_unique<S3ArtifactStore>(where);
    }
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Local(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / "local" / name).string();
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // Replaces the stored bytes behind the store's back (keeping the recorded digest).
  void Corrupt(const std::string& key, const std::string& bytes, const std::string& recorded_sha) {
    if (GetParam() == "file") {
      std::ofstream((dir_ / "store" / key).string(), std::ios::binary | std::ios::trunc) << bytes;
    } else {
      // Through boto3, an independent S3 client, keeping the metadata that records the digest.
      const std::string local = Local("corrupt.bin", bytes);
      const std::string cmd = "AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing '" + test::PeerPython() +
                              "' -c \"import boto3,sys; boto3.client('s3', endpoint_url=sys.argv[1], "
                              "region_name='us-east-1').put_object(Bucket=sys.argv[2], Key=sys.argv[3], "
                              "Body=open(sys.argv[4],'rb').read(), Metadata={'sha256': sys.argv[5]})\" " +
                              s3_->endpoint() + " " + s3_->bucket() + " " + prefix_ + key + " " + local + " " +
                              recorded_sha;
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
  }

  static test::S3Server* s3_;
  static int counter_;
  fs::path dir_;
  std::string prefix_;
  std::unique_ptr<ArtifactStore> store_;
};

test::S3Server* ArtifactStoreTest::s3_ = nullptr;
int ArtifactStoreTest::counter_ = 0;

TEST_P(ArtifactStoreTest, PublishedBytesLoadBackWithTheirDigest) {
  // 3 MiB + 17: several write callbacks and buffer sizes on the way.
  const std::string bytes = RandomBytes((3 << 20) + 17, 1);
  const ArtifactInfo info = store_->publish("jobs/j1/model.anvil", Local("a", bytes));
  EXPECT_EQ(info.sha256, sha256_hex(bytes));
  EXPECT_EQ(info.bytes, static_cast<int64_t>(bytes.size()));
  const std::optional<ArtifactInfo> st = store_->stat("jobs/j1/model.anvil");
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->sha256, sha256_hex(bytes));
  EXPECT_EQ(st->bytes, static_cast<int64_t>(bytes.size()));

  const std::string cache = (dir_ / "cache" / "jobs/j1/model.anvil").string();
  const std::string path = store_->open("jobs/j1/model.anvil", cache, sha256_hex(bytes));
  EXPECT_EQ(read_file(path), bytes);
  const std::string placed = (dir_ / "elsewhere" / "x.bin").string();
  const ArtifactInfo fetched = store_->fetch_to("jobs/j1/model.anvil", placed);
  EXPECT_EQ(fetched.sha256, sha256_hex(bytes));
  EXPECT_EQ(read_file(placed), bytes);
  // fetch_to replaces what is there.
  std::ofstream(placed, std::ios::trunc) << "old";
  store_->fetch_to("jobs/j1/model.anvil", placed);
  EXPECT_EQ(read_file(placed), bytes);
}

TEST_P(ArtifactStoreTest, ObjectsAreWrittenOnce) {
  store_->publish("k/a.bin", Local("a", "first"));
  // The same bytes again (a retried publish): fine.
  EXPECT_EQ(store_->publish("k/a.bin", Local("b", "first")).sha256, sha256_hex("first"));
  std::string message;
  EXPECT_EQ(KindOf([&] { store_->publish("k/a.bin", Local("c", "second")); }, &message), ArtifactError::Kind::kExists);
  EXPECT_NE(message.find("written once"), std::string::npos) << message;
  EXPECT_EQ(read_file(store_->open("k/a.bin", (dir_ / "c1").string(), "")), "first");
}

TEST_P(ArtifactStoreTest, CorruptBytesAreRefusedOnEveryLoad) {
  const std::string good = RandomBytes(4096, 2);
  store_->publish("jobs/j2/checkpoint.safetensors", Local("a", good));
  std::string bad = good;
  bad[100] ^= 1;
  Corrupt("jobs/j2/checkpoint.safetensors", bad, sha256_hex(good));
  const std::string cache = (dir_ / "cache2").string();
  std::string message;
  EXPECT_EQ(KindOf([&] { store_->open("jobs/j2/checkpoint.safetensors", cache, ""); }, &message),
            ArtifactError::Kind::kCorrupt);
  EXPECT_NE(message.find("corrupt"), std::string::npos) << message;
  EXPECT_EQ(KindOf([&] { store_->fetch_to("jobs/j2/checkpoint.safetensors", (dir_ / "placed").string()); }, &message),
            ArtifactError::Kind::kCorrupt)
      << message;
  // Nothing half-checked is left where the caller asked for the bytes.
  EXPECT_FALSE(fs::exists(dir_ / "placed"));
}

TEST_P(ArtifactStoreTest, AWrongExpectedDigestIsRefused) {
  store_->publish("m.onnx", Local("a", "model bytes"));
  EXPECT_EQ(KindOf([&] { store_->open("m.onnx", (dir_ / "c").string(), sha256_hex("other bytes")); }),
            ArtifactError::Kind::kCorrupt);
}

TEST_P(ArtifactStoreTest, MissingKeys) {
  EXPECT_FALSE(store_->stat("nothing/here").has_value());
  EXPECT_EQ(KindOf([&] { store_->open("nothing/here", (dir_ / "c").string(), ""); }), ArtifactError::Kind::kNotFound);
  EXPECT_EQ(KindOf([&] { store_->fetch_to("nothing/here", (dir_ / "d").string()); }), ArtifactError::Kind::kNotFound);
  store_->remove("nothing/here");  // no-op
}

TEST_P(ArtifactStoreTest, ListsPublishedKeysUnderAPrefixAndRemoves) {
  for (const std::string key : {"jobs/a/checkpoints/e1-s10.safetensors", "jobs/a/checkpoints/e1-s20.safetensors",
                                "jobs/a/model.anvil", "jobs/b/model.anvil"}) {
    store_->publish(key, Local(key, key));
  }
  EXPECT_EQ(store_->list("jobs/a/checkpoints/"), (std::vector<std::string>{"jobs/a/checkpoints/e1-s10.safetensors",
                                                                           "jobs/a/checkpoints/e1-s20.safetensors"}));
  EXPECT_EQ(store_->list("jobs/a/").size(), 3u);
  store_->remove("jobs/a/checkpoints/e1-s10.safetensors");
  EXPECT_EQ(store_->list("jobs/a/checkpoints/"), (std::vector<std::string>{"jobs/a/checkpoints/e1-s20.safetensors"}));
  EXPECT_FALSE(store_->stat("jobs/a/checkpoints/e1-s10.safetensors").has_value());
}

TEST_P(ArtifactStoreTest, KeysCannotLeaveTheStore) {
  for (const std::string key : {"../escape", "/abs/path", "a//b", "a/./b", "", "a/", "sp ace", "a/../../b"}) {
    EXPECT_EQ(KindOf([&] { store_->stat(key); }), ArtifactError::Kind::kOther) << key;
  }
}

TEST_P(ArtifactStoreTest, ConcurrentPublishesOfOneKeyLeaveOneWholeObject) {
  const std::string bytes = RandomBytes(1 << 20, 3);
  std::vector<std::string> locals;
  for (int i = 0; i < 4; ++i) locals.push_back(Local("p" + std::to_string(i), bytes));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { store_->publish("same/key.bin", locals[i]); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(read_file(store_->open("same/key.bin", (dir_ / "c").string(), sha256_hex(bytes))), bytes);
  EXPECT_EQ(store_->list("same/"), (std::vector<std::string>{"same/key.bin"}));
}

INSTANTIATE_TEST_SUITE_P(Engines, ArtifactStoreTest, ::testing::Values("file", "s3"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// Publishers of different bytes under one key at once: one wins, the others are kExists, and
// the object that stays loads with the digest of its own bytes (never a winner's bytes beside a
// loser's digest).
TEST(FileArtifactStoreTest, ConcurrentPublishesOfDifferentBytesLeaveOneConsistentObject) {
  char tmpl[] = "/tmp/anvil-artifacts-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path root = tmpl;
  for (int round = 0; round < 20; ++round) {
    FileArtifactStore store((root / "store").string());
    std::vector<std::string> sources;
    for (int i = 0; i < 4; ++i) {
      sources.push_back((root / ("src-" + std::to_string(round) + "-" + std::to_string(i))).string());
      std::ofstream(sources.back(), std::ios::binary) << RandomBytes(256 << 10, static_cast<uint32_t>(100 * round + i));
    }
    std::atomic<int> won{0}, refused{0};
    std::vector<std::thread> threads;
    const std::string key = "race/" + std::to_string(round) + ".bin";
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, i] {
        try {
          store.publish(key, sources[static_cast<size_t>(i)]);
          ++won;
        } catch (const ArtifactError& e) {
          if (e.kind() == ArtifactError::Kind::kExists) ++refused;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(won.load(), 1) << round;
    EXPECT_EQ(refused.load(), 3) << round;
    const std::string bytes = read_file(store.open(key, "", ""));  // checked against its digest
    EXPECT_EQ(store.stat(key)->sha256, sha256_hex(bytes));
  }
  fs::remove_all(root);
}

// Checkpoint keys order by lease epoch first: a replica cut off from its job that went on to
// higher steps under its old epoch neither outranks nor prunes its successor's checkpoints; a
// resume whose named checkpoint is gone takes the latest epoch's newest, even one newer than
// the row's (published but not yet named when the replica stopped).
TEST(JobCheckpointsTest, ALaterEpochWinsOverHigherStepsOfAnEarlierOne) {
  char tmpl[] = "/tmp/anvil-artifacts-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path root = tmpl;
  FileArtifactStore store((root / "store").string());
  auto checkpoint = [&](const std::string& name, const std::string& bytes) {
    const std::string p = (root / name).string();
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
    return p;
  };
  // The successor (epoch 5) resumed at step 100 and checkpointed at 150 and 200.
  const std::string s150 = publish_checkpoint(store, "j", 5, 150, checkpoint("a", "e5 s150"));
  const std::string s200 = publish_checkpoint(store, "j", 5, 200, checkpoint("b", "e5 s200"));
  // The cut-off replica (epoch 4) publishes late, at higher steps; its pruning keeps epoch 5's.
  publish_checkpoint(store, "j", 4, 900, checkpoint("c", "e4 s900"));
  publish_checkpoint(store, "j", 4, 950, checkpoint("d", "e4 s950"));
  EXPECT_TRUE(store.stat(s150).has_value());
  EXPECT_TRUE(store.stat(s200).has_value());
  // The row names e5-s200; it is gone: the resume takes e5-s150, never e4's later steps.
  store.remove(s200);
  const std::string job_dir = (root / "job").string();
  EXPECT_EQ(place_checkpoint(store, "j", s200, job_dir), s150);
  EXPECT_EQ(read_file(job_dir + "/checkpoint.safetensors"), "e5 s150");
  // Placed already: nothing is fetched or rotated again.
  EXPECT_EQ(place_checkpoint(store, "j", s150, job_dir), s150);
  EXPECT_FALSE(fs::exists(job_dir + "/checkpoint.1.safetensors"));
  // The row lagged behind the publisher (it names e5-s150, pruned since; e5-s250 and e5-s300
  // were published after it): the newest of the row's own lease is taken.
  const std::string s250 = publish_checkpoint(store, "j", 5, 250, checkpoint("e", "e5 s250"));
  const std::string s300 = publish_checkpoint(store, "j", 5, 300, checkpoint("f", "e5 s300"));
  EXPECT_FALSE(store.stat(s150).has_value());  // pruned: two kept
  EXPECT_EQ(place_checkpoint(store, "j", s150, job_dir), s300);
  EXPECT_EQ(read_file(job_dir + "/checkpoint.safetensors"), "e5 s300");
  // The checkpoint the row names is never pruned, however many are published after it.
  const std::string s350 = publish_checkpoint(store, "j", 5, 350, checkpoint("g", "e5 s350"), 2, s300);
  const std::string s400 = publish_checkpoint(store, "j", 5, 400, checkpoint("h", "e5 s400"), 2, s300);
  publish_checkpoint(store, "j", 5, 450, checkpoint("i", "e5 s450"), 2, s300);
  EXPECT_TRUE(store.stat(s300).has_value());
  EXPECT_FALSE(store.stat(s350).has_value());
  EXPECT_TRUE(store.stat(s400).has_value());
  fs::remove_all(root);
}

TEST(FileArtifactStoreTest, PublishesAFileAlreadyInPlaceWithoutACopy) {
  char tmpl[] = "/tmp/anvil-artifacts-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path root = tmpl;
  FileArtifactStore store(root.string());
  fs::create_directories(root / "jobs/j");
  std::ofstream(root / "jobs/j/model.anvil") << "in place";
  const ArtifactInfo info = store.publish("jobs/j/model.anvil", (root / "jobs/j/model.anvil").string());
  EXPECT_EQ(info.sha256, sha256_hex("in place"));
  EXPECT_EQ(store.open("jobs/j/model.anvil", "", ""), (root / "jobs/j/model.anvil").string());
  // A file elsewhere on the same filesystem is linked in, not copied.
  std::ofstream(root / "scratch.bin") << "linked";
  store.publish("jobs/j/linked.bin", (root / "scratch.bin").string());
  EXPECT_EQ(fs::hard_link_count(root / "scratch.bin"), 2u);
  fs::remove_all(root);
}

TEST(S3ArtifactStoreTest, NothingListeningIsUnavailableAndAMissingBucketIsCreated) {
  S3Location where;
  where.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  where.bucket = "anvil";
  where.access_key = where.secret_key = "testing";
  where.timeout_s = 5;
  std::string message;
  EXPECT_EQ(KindOf([&] { S3ArtifactStore store(where); }, &message), ArtifactError::Kind::kUnavailable);
  EXPECT_NE(message.find("127.0.0.1:1"), std::string::npos) << message;
  if (!test::S3Server::Available(test::PeerPython())) GTEST_SKIP() << "no moto server";
  test::S3Server::Options o;
  o.python = test::PeerPython();
  test::S3Server s3(o);
  where.endpoint = s3.endpoint();
  where.bucket = "made-by-anvild";
  ASSERT_EQ(s3.Request("HEAD", "/made-by-anvild"), 404);
  char tmpl[] = "/tmp/anvil-bucket-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string file = std::string(tmpl) + "/f";
  std::ofstream(file) << "bytes";
  {
    S3ArtifactStore store(where);
    store.publish("k", file);
  }
  fs::remove_all(tmpl);
  EXPECT_EQ(s3.Request("HEAD", "/made-by-anvild"), 200);
  S3ArtifactStore again(where);  // there now: used as it is
  EXPECT_TRUE(again.stat("k").has_value());
}

// The artifact store's digest (OpenSSL) against the engine's own FIPS 180-4 implementation and
// the standard's example ("abc"), at sizes around the block and buffer boundaries.
TEST(ArtifactDigestTest, MatchesTheEnginesSha256) {
  Digest abc;
  abc.update("abc", 3);
  EXPECT_EQ(abc.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  char tmpl[] = "/tmp/anvil-digest-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  for (size_t n : {size_t{0}, size_t{55}, size_t{64}, size_t{1} << 20, (size_t{1} << 20) + 1, size_t{3000017}}) {
    const std::string bytes = RandomBytes(n, static_cast<uint32_t>(n));
    const std::string path = std::string(tmpl) + "/f";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    EXPECT_EQ(sha256_file(path), sha256_hex(bytes)) << n;
  }
  fs::remove_all(tmpl);
  EXPECT_EQ(KindOf([] { sha256_file("/nonexistent/file"); }), ArtifactError::Kind::kNotFound);
}

// Checkpoints published off the training thread: each one's bytes as they were when it was
// submitted (the worker replaces its file right after), the newest named after a flush, older
// ones still queued superseded, a forgotten job's publication never named.
TEST(CheckpointPublisherTest, PublishesWhatWasSubmittedAndTheNewestWins) {
  char tmpl[] = "/tmp/anvil-publisher-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path root = tmpl;
  FileArtifactStore store((root / "store").string());
  fs::create_directories(root / "job");
  const std::string path = (root / "job" / "checkpoint.safetensors").string();
  std::vector<std::string> contents;
  {
    CheckpointPublisher publisher(store);
    for (int step = 1; step <= 20; ++step) {
      contents.push_back(RandomBytes(64 << 10, static_cast<uint32_t>(step)));
      write_file_atomic(path, contents.back());  // replaced by rename, as the trainer does
      publisher.submit("j1", 3, step * 10, path);
    }
    const std::string key = publisher.flush("j1");
    ASSERT_THAT(key, ::testing::StartsWith("jobs/j1/checkpoints/e3-s200-t"));
    EXPECT_EQ(read_file(store.open(key, "", "")), contents.back());
    EXPECT_EQ(publisher.take_published("j1"), "");  // taken once
    // Every published one holds the bytes of its own step (two kept).
    for (const std::string& k : store.list("jobs/j1/checkpoints/")) {
      const std::optional<CheckpointKey> parsed = parse_checkpoint_key(k);
      ASSERT_TRUE(parsed.has_value()) << k;
      EXPECT_EQ(read_file(store.open(k, "", "")), contents[static_cast<size_t>(parsed->step / 10 - 1)]) << k;
    }
    EXPECT_LE(store.list("jobs/j1/checkpoints/").size(), 2u);
    // The key the row names is kept by pruning until the row names a newer one.
    publisher.set_named("j3", "");
    publisher.submit("j3", 1, 10, path);
    const std::string first = publisher.flush("j3");  // the row names it now
    ASSERT_FALSE(first.empty());
    for (int step = 20; step <= 50; step += 10) {
      publisher.submit("j3", 1, step, path);
      // Published but not taken: the row still names `first`.
      for (int i = 0; i < 500; ++i) {
        const std::vector<std::string> keys = store.list("jobs/j3/checkpoints/");
        if (std::any_of(keys.begin(), keys.end(), [&](const std::string& k) {
              return k.find("-s" + std::to_string(step) + "-") != std::string::npos;
            })) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    EXPECT_EQ(publisher.flush("j3").find("-s50-") != std::string::npos, true);  // all published
    EXPECT_TRUE(store.stat(first).has_value()) << first;
    EXPECT_EQ(store.list("jobs/j3/checkpoints/").size(), 3u);  // the newest two and the named one
    // A forgotten job's publication is not named afterwards.
    publisher.submit("j2", 1, 10, path);
    publisher.forget("j2");
    EXPECT_EQ(publisher.flush("j2"), "");
  }
  // No staging link is left beside the worker's file.
  int files = 0;
  for (const auto& e : fs::directory_iterator(root / "job")) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
  fs::remove_all(root);
}

TEST(ArtifactLocationTest, ParsesAndRefuses) {
  const S3Location where = parse_s3_location("s3://my-bucket/some/prefix/");
  EXPECT_EQ(where.bucket, "my-bucket");
  EXPECT_EQ(where.prefix, "some/prefix/");
  EXPECT_EQ(parse_s3_location("s3://bkt").prefix, "");
  EXPECT_EQ(KindOf([] { parse_s3_location("s3://UPPER"); }), ArtifactError::Kind::kOther);
  EXPECT_EQ(KindOf([] { parse_s3_location("s3://bkt/../x"); }), ArtifactError::Kind::kOther);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  std::string message;
  KindOf([] { open_artifact_store("s3://bkt", "/tmp"); }, &message);
  EXPECT_NE(message.find("AWS_ACCESS_KEY_ID"), std::string::npos) << message;
  KindOf([] { open_artifact_store("ftp://x/y", "/tmp"); }, &message);
  EXPECT_NE(message.find("expected a folder"), std::string::npos) << message;
}

}  // namespace
}  // namespace anvil::server
