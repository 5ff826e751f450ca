// A job's findings as a user reads them: each code once, at its highest severity (a code fires
// again only when it worsens), covering the steps from its first firing, most severe first and
// then in the order they fired. GetFindings and the status page both show this view.
//
// Thread-safety: not thread-safe; a value type.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::server {

class FindingSet {
 public:
  void add(const v1::Finding& finding);
  bool has(const std::string& code) const { return by_code_.count(code) != 0; }
  std::vector<v1::Finding> sorted() const;
  // 2 critical, 1 warning, 0 info (or unknown).
  static int severity_rank(const std::string& severity);

 private:
  std::map<std::string, v1::Finding> by_code_;
};

}  // namespace anvil::server
