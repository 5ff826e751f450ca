// Cooperative interruption of long data loads (core/util/interruption.h): a check installed on
// the thread runs at the loops' interruption points and may stop a large table's read and parse
// part-way; without one, nothing changes.
#include "core/util/interruption.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "core/data/datasets/csv.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

struct Stop : std::runtime_error {
  Stop() : std::runtime_error("stopped") {}
};

// A table of `rows` rows of four numbers and a class.
std::string WriteTable(const std::string& name, int rows) {
  const fs::path path = fs::path(::testing::TempDir()) / name;
  std::ofstream out(path);
  out << "a,b,c,d,label\n";
  for (int r = 0; r < rows; ++r) out << r << ",0.5,-1.25," << r % 7 << "," << r % 3 << "\n";
  return path.string();
}

TEST(Interruption, ScopesNestAndRestoreTheCheckBefore) {
  int outer = 0, inner = 0;
  interruption_point();  // no check: nothing happens
  {
    const ScopedInterruptionCheck a([&] { ++outer; });
    interruption_point();
    {
      const ScopedInterruptionCheck b([&] { ++inner; });
      interruption_point();
      interruption_point();
    }
    interruption_point();
  }
  interruption_point();
  EXPECT_EQ(outer, 2);
  EXPECT_EQ(inner, 2);
}

TEST(Interruption, ALargeTableStopsPartWayAndLoadsWholeWithoutACheck) {
  const int rows = 200000;  // 49 interruption points in the row loop, 4 in the line split
  const std::string path = WriteTable("interruption.csv", rows);
  int points = 0;
  {
    const ScopedInterruptionCheck count([&] { ++points; });
    const data::CsvDataset whole(path, {});
    EXPECT_EQ(whole.size(), rows);
  }
  EXPECT_GE(points, rows / 4096) << "the row loop passes an interruption point every 4096 rows";
  int seen = 0;
  const ScopedInterruptionCheck stop_at_tenth([&] {
    if (++seen == 10) throw Stop();
  });
  EXPECT_THROW(data::CsvDataset(path, {}), Stop);
  EXPECT_EQ(seen, 10) << "stopped at the tenth point, not after the load";
}

}  // namespace
}  // namespace anvil
