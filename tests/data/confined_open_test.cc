// Files opened beneath a root: the checks happen when a file is opened, so symlinks made or
// swapped in after a path was first checked cannot lead a reader out of the root.
#include "core/util/confined_open.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/anvil.h"
#include "core/data/datasets/csv.h"
#include "core/data/datasets/image_folder.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ConfinedOpenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("anvil-confined-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    root_ = base_ / "root";
    outside_ = base_ / "outside";
    fs::create_directories(root_ / "sub");
    fs::create_directories(outside_);
    std::ofstream(root_ / "sub" / "inside.txt") << "inside";
    std::ofstream(outside_ / "secret.txt") << "secret";
  }
  void TearDown() override { fs::remove_all(base_); }

  std::string ErrorOf(const std::string& path) {
    try {
      ::close(open_beneath(root_.string(), path, O_RDONLY));
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  }

  fs::path base_, root_, outside_;
};

TEST_F(ConfinedOpenTest, PathsInsideOpenAndEscapesAreRefused) {
  EXPECT_EQ(ErrorOf((root_ / "sub" / "inside.txt").string()), "");
  EXPECT_EQ(ErrorOf("sub/inside.txt"), "");
  EXPECT_THAT(ErrorOf("../outside/secret.txt"), HasSubstr("leads outside"));
  EXPECT_THAT(ErrorOf((outside_ / "secret.txt").string()), HasSubstr("outside"));
  EXPECT_THAT(ErrorOf((root_ / "sub" / ".." / ".." / "outside" / "secret.txt").string()), HasSubstr("outside"));
  EXPECT_THAT(ErrorOf("sub/missing.txt"), HasSubstr("No such file"));
}

TEST_F(ConfinedOpenTest, SymlinksOutAreRefusedAndSymlinksWithinAreFollowed) {
  fs::create_symlink(outside_ / "secret.txt", root_ / "sub" / "absolute-link.txt");
  fs::create_symlink("../../outside/secret.txt", root_ / "sub" / "relative-link.txt");
  fs::create_symlink("inside.txt", root_ / "sub" / "inside-link.txt");
  fs::create_directory_symlink(outside_, root_ / "swapped");
  EXPECT_THAT(ErrorOf("sub/absolute-link.txt"), HasSubstr("leads outside"));
  EXPECT_THAT(ErrorOf("sub/relative-link.txt"), HasSubstr("leads outside"));
  EXPECT_THAT(ErrorOf("swapped/secret.txt"), HasSubstr("leads outside"));
  EXPECT_EQ(ErrorOf("sub/inside-link.txt"), "");
  EXPECT_TRUE(opens_beneath(root_.string(), (root_ / "sub").string()));
  EXPECT_FALSE(opens_beneath(root_.string(), (root_ / "swapped").string()));
}

TEST_F(ConfinedOpenTest, DatasetsConfinedToTheRootRefuseSymlinksOut) {
  // An image folder with one real image per class and a symlink to an image outside.
  const Tensor pixels = zeros({4, 4, 3}, kUInt8);
  for (const char* cls : {"cat", "dog"}) {
    fs::create_directories(root_ / "images" / cls);
    data::write_png((root_ / "images" / cls / "a.png").string(), pixels);
  }
  data::write_png((outside_ / "stolen.png").string(), pixels);
  data::ImageFolderOptions confined;
  confined.confine_to = root_.string();
  EXPECT_EQ(data::ImageFolder((root_ / "images").string(), confined).size(), 2);
  fs::create_symlink(outside_ / "stolen.png", root_ / "images" / "cat" / "b.png");
  try {
    data::ImageFolder((root_ / "images").string(), confined);
    ADD_FAILURE() << "a symlink out of the root was followed";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("a symbolic link leading outside"));
  }
  // Unconfined (a user's own folder), the same link is an ordinary image.
  EXPECT_EQ(data::ImageFolder((root_ / "images").string()).size(), 3);
  // A directory symlink inside a class folder is not walked into when confined.
  fs::remove(root_ / "images" / "cat" / "b.png");
  fs::create_directory_symlink(outside_, root_ / "images" / "cat" / "more");
  EXPECT_EQ(data::ImageFolder((root_ / "images").string(), confined).size(), 2);
  // The whole folder swapped for a symlink out (after a submit-time check): refused.
  fs::create_directory_symlink(outside_, root_ / "swapped-images");
  EXPECT_THROW(data::ImageFolder((root_ / "swapped-images").string(), confined), Error);
  // A CSV reached through a symlink out, and a FIFO posing as a CSV.
  std::ofstream(outside_ / "t.csv") << "a,b\n1,0\n2,1\n";
  fs::create_symlink(outside_ / "t.csv", root_ / "t.csv");
  data::CsvOptions csv;
  csv.confine_to = root_.string();
  EXPECT_THROW(data::CsvDataset((root_ / "t.csv").string(), csv), Error);
  ASSERT_EQ(::mkfifo((root_ / "fifo.csv").c_str(), 0600), 0);
  try {
    data::CsvDataset((root_ / "fifo.csv").string(), csv);
    ADD_FAILURE() << "a FIFO was read as a CSV";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a regular file"));
  }
}

}  // namespace
}  // namespace anvil
