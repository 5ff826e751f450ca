// Bearer tokens with scopes. A token is 32 random bytes shown once, as "anvil_" + 64 hex
// digits, when it is created; the token file keeps only its SHA-256, its name and its scopes
// (JSON, written atomically with mode 0600), so a leaked file grants nothing.
//
//   train  submit, list, watch and cancel jobs (the Training service)
//   serve  predict, list, describe and export models (the Serving service)
//   admin  both
//
// The server reloads the file when it changes (checked at most once a second), so tokens
// created or revoked while it runs take effect without a restart.
//
// Thread-safety: a TokenSet is safe for concurrent use (one mutex over what it loaded).
// create_token and revoke_token rewrite the file whole (atomically), from one writer at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/util/mutex.h"

namespace anvil::server {

enum class Scope { kTrain, kServe, kAdmin };

std::string scope_name(Scope s);
// "train", "serve" or "admin"; throws anvil::Error naming the valid ones.
Scope parse_scope(const std::string& name);

struct TokenEntry {
  std::string name;
  std::string sha256;  // of the whole token text, lowercase hex
  std::vector<Scope> scopes;
  int64_t created_unix_ms = 0;
  bool allows(Scope needed) const;
};

// The token file's entries; an absent file has none. Throws anvil::Error for a malformed one.
std::vector<TokenEntry> read_token_file(const std::string& path);
// Adds a token named `name` (unique in the file) with `scopes` and returns the token text.
std::string create_token(const std::string& path, const std::string& name, const std::vector<Scope>& scopes);
// Removes the token named `name`; false when there is none.
bool revoke_token(const std::string& path, const std::string& name);

// The server's view of the file: which entry a presented token is, if any.
class TokenSet {
 public:
  explicit TokenSet(std::string path);
  // True when the file holds at least one token, held one since the start (revoking the last
  // token or removing the file never turns authentication off), or cannot be read: then every
  // call must present a valid one.
  bool enabled();
  // Why the file is unusable ("" when it is fine).
  std::string error();
  // What one call needs, under one lock and one reload check: whether a token is required,
  // why the file is unusable ("" when fine), and the entry whose hash matches `token`
  // (compared in constant time; nullptr: none was presented).
  struct Verdict {
    bool required = false;
    std::string file_error;
    std::optional<TokenEntry> entry;
  };
  Verdict check(const std::string* token);
  const std::string& path() const { return path_; }

 private:
  void ReloadIfChanged() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool RequiredLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !entries_.empty() || !error_.empty() || had_tokens_;
  }

  const std::string path_;
  Mutex mu_;
  std::string error_ ABSL_GUARDED_BY(mu_);  // why the file could not be read: then no token is accepted (fail closed)
  bool had_tokens_ ABSL_GUARDED_BY(mu_) = false;  // once on, authentication stays on until a restart
  std::vector<TokenEntry> entries_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point checked_ ABSL_GUARDED_BY(mu_){};
  int64_t mtime_ns_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t size_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace anvil::server
