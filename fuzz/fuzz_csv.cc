// A CSV dataset file (a job's dataset.path): headers, delimiters, label columns, numbers.
#include <string>

#include "core/data/datasets/csv.h"
#include "core/util/error.h"
#include "fuzz/input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::WriteInput(".csv", data, size);
  try {
    anvil::data::CsvDataset ds(path);
    if (ds.size() > 0) (void)ds.get(0);
  } catch (const anvil::Error&) {
  }
  return 0;
}
