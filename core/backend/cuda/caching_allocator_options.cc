// CachingAllocator::parse_options: reads ANVIL_CUDA_ALLOC_CONF. Apart from the allocator
// because it is string handling, not memory bookkeeping.
#include <charconv>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "core/backend/cuda/caching_allocator.h"
#include "core/util/error.h"

namespace anvil::cuda {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

CachingAllocator::Options CachingAllocator::parse_options(std::string_view conf) {
  Options options;
  while (!conf.empty()) {
    const size_t comma = conf.find(',');
    const std::string_view entry = Trim(conf.substr(0, comma));
    conf = comma == std::string_view::npos ? std::string_view() : conf.substr(comma + 1);
    if (entry.empty()) continue;  // tolerate "a:1,,b:2" and a trailing comma
    const size_t colon = entry.find(':');
    const std::string_view key = Trim(entry.substr(0, colon));
    if (key != "expandable_segments" && key != "max_split_size_mb") {
      throw std::invalid_argument(
          detail::StrCat("ANVIL_CUDA_ALLOC_CONF: unknown key '", key,
                         "'; accepted keys: expandable_segments (true|false), max_split_size_mb (integer > 20)"));
    }
    const std::string_view value = colon == std::string_view::npos ? std::string_view() : Trim(entry.substr(colon + 1));
    if (key == "expandable_segments") {
      if (value == "true" || value == "True") {
        options.expandable_segments = true;
      } else if (value == "false" || value == "False") {
        options.expandable_segments = false;
      } else {
        throw std::invalid_argument(
            detail::StrCat("ANVIL_CUDA_ALLOC_CONF: expandable_segments accepts true or false, got '", value, "'"));
      }
      continue;
    }
    // Limits at or under the 20 MiB large segment would leave those segments unsplittable.
    size_t mb = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), mb);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || mb <= 20 || mb > (SIZE_MAX >> 20)) {
      throw std::invalid_argument(
          detail::StrCat("ANVIL_CUDA_ALLOC_CONF: max_split_size_mb accepts an integer number of ",
                         "MiB greater than 20, got '", value, "'"));
    }
    options.max_split_size = mb << 20;
  }
  return options;
}

}  // namespace anvil::cuda
