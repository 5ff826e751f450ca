// A CSV dataset file (a job's dataset.path): headers, delimiters, label columns, numbers.
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/data/datasets/csv.h"
#include "core/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/anvil-fuzz-" + std::to_string(::getpid()) + ".csv";
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                 static_cast<std::streamsize>(size));
  try {
    anvil::data::CsvDataset ds(path);
    if (ds.size() > 0) (void)ds.get(0);
  } catch (const anvil::Error&) {
  }
  return 0;
}
