// Pagination of the listings (Google AIP-158): ListJobs and ListModels return at most a page
// and, while more remain, a next_page_token; the client passes it back to read on. The token is
// opaque to clients (URL-safe base64 of the listing's kind, its filter and the last item's
// position) and the store reads from that position by key (keyset pagination), so a page costs
// the same however deep it is and rows added meanwhile neither repeat nor shift a page.
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace anvil::server {

inline constexpr int kDefaultPageSize = 100;
inline constexpr int kMaxPageSize = 1000;

// The page size for a request's page_size: 0 means the default, values above the maximum are
// the maximum (AIP-158); a negative one is INVALID_ARGUMENT.
int page_size_of(int64_t requested, const char* field = "page_size");

// A token for the page after `position` of listing `kind` ("jobs", "models") under `filter`.
std::string make_page_token(const std::string& kind, const std::string& filter, const std::string& position);

// The position in `token`; throws ServiceError(INVALID_ARGUMENT) naming page_token when it is not
// one this server made, or was made for another listing or filter.
std::string read_page_token(const std::string& token, const std::string& kind, const std::string& filter);

}  // namespace anvil::server
