#include "server/finding_set.h"

#include <algorithm>

namespace anvil::server {

int FindingSet::severity_rank(const std::string& severity) {
  return severity == "critical" ? 2 : severity == "warning" ? 1 : 0;
}

void FindingSet::add(const v1::Finding& finding) {
  auto [it, fresh] = by_code_.emplace(finding.code(), finding);
  if (!fresh && severity_rank(finding.severity()) >= severity_rank(it->second.severity())) {
    const int64_t first = it->second.first_step();
    it->second = finding;
    it->second.set_first_step(std::min(first, finding.first_step()));
  }
}

std::vector<v1::Finding> FindingSet::sorted() const {
  std::vector<v1::Finding> out;
  out.reserve(by_code_.size());
  for (const auto& [code, f] : by_code_) out.push_back(f);
  std::stable_sort(out.begin(), out.end(), [](const v1::Finding& a, const v1::Finding& b) {
    if (severity_rank(a.severity()) != severity_rank(b.severity()))
      return severity_rank(a.severity()) > severity_rank(b.severity());
    return a.first_step() < b.first_step();
  });
  return out;
}

}  // namespace anvil::server
