#include "server/page_token.h"

#include <absl/strings/escaping.h>

#include "server/status.h"

namespace anvil::server {
namespace {

// "<kind>\n<filter>\n<position>": the fields are the server's own, none holds a newline but
// the filter, which is escaped first.
std::string EscapeNewlines(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
  return out;
}

}  // namespace

int page_size_of(int64_t requested, const char* field) {
  ANVIL_SERVICE_CHECK(requested >= 0, absl::StatusCode::kInvalidArgument, field, ": expected >= 0, got ", requested);
  if (requested == 0) return kDefaultPageSize;
  return static_cast<int>(std::min<int64_t>(requested, kMaxPageSize));
}

std::string make_page_token(const std::string& kind, const std::string& filter, const std::string& position) {
  return absl::WebSafeBase64Escape("v1\n" + kind + "\n" + EscapeNewlines(filter) + "\n" + position);
}

std::string read_page_token(const std::string& token, const std::string& kind, const std::string& filter) {
  std::string plain;
  const std::string head = "v1\n" + kind + "\n";
  ANVIL_SERVICE_CHECK(
      token.size() <= 4096 && absl::WebSafeBase64Unescape(token, &plain) && plain.compare(0, head.size(), head) == 0,
      absl::StatusCode::kInvalidArgument,
      "page_token: not a token of this listing; pass a next_page_token from a previous reply");
  const std::string rest = plain.substr(head.size());
  const std::string expected = EscapeNewlines(filter) + "\n";
  ANVIL_SERVICE_CHECK(rest.compare(0, expected.size(), expected) == 0, absl::StatusCode::kInvalidArgument,
                      "page_token: it was made for another filter; pass the same filter as the first page");
  return rest.substr(expected.size());
}

}  // namespace anvil::server
