#include "server/tokens.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/util/clock.h"
#include "core/util/error.h"
#include "core/util/file.h"
#include "core/util/sha256.h"

namespace anvil::server {
namespace {

using Json = nlohmann::json;

Json ToJson(const std::vector<TokenEntry>& entries) {
  Json out = Json::array();
  for (const TokenEntry& e : entries) {
    Json scopes = Json::array();
    for (Scope s : e.scopes) scopes.push_back(scope_name(s));
    out.push_back({{"name", e.name}, {"sha256", e.sha256}, {"scopes", scopes}, {"created_unix_ms", e.created_unix_ms}});
  }
  return Json{{"tokens", out}};
}

void Write(const std::string& path, const std::vector<TokenEntry>& entries) {
  AtomicFile f(path, 0600);
  f.write(ToJson(entries).dump(2) + "\n");
  f.commit();
}

std::string RandomHex(size_t bytes) {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::string raw(bytes, '\0');
  urandom.read(raw.data(), static_cast<std::streamsize>(bytes));
  ANVIL_CHECK(urandom.gcount() == static_cast<std::streamsize>(bytes), "tokens: cannot read /dev/urandom");
  return hex_encode(raw);
}

// Equal strings compare in time independent of where they differ.
bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

std::string scope_name(Scope s) {
  switch (s) {
    case Scope::kTrain:
      return "train";
    case Scope::kServe:
      return "serve";
    case Scope::kAdmin:
      return "admin";
  }
  return "?";
}

Scope parse_scope(const std::string& name) {
  if (name == "train") return Scope::kTrain;
  if (name == "serve") return Scope::kServe;
  if (name == "admin") return Scope::kAdmin;
  throw Error("token scope: expected train, serve or admin, got \"" + name + "\"");
}

bool TokenEntry::allows(Scope needed) const {
  return std::any_of(scopes.begin(), scopes.end(), [&](Scope s) { return s == needed || s == Scope::kAdmin; });
}

std::vector<TokenEntry> read_token_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  Json j;
  try {
    j = Json::parse(in);
  } catch (const std::exception& e) {
    throw Error("token file " + path + ": not valid JSON: " + e.what());
  }
  ANVIL_CHECK(j.is_object() && j.contains("tokens") && j["tokens"].is_array(), "token file ", path,
              ": expected {\"tokens\": [...]}");
  std::vector<TokenEntry> out;
  for (const Json& t : j["tokens"]) {
    ANVIL_CHECK(t.is_object() && t.value("name", "").size() > 0 && t.value("sha256", "").size() == 64 &&
                    t.contains("scopes") && t["scopes"].is_array(),
                "token file ", path, ": each token needs a name, a 64-digit sha256 and a scopes list");
    TokenEntry e;
    e.name = t["name"].get<std::string>();
    e.sha256 = t["sha256"].get<std::string>();
    for (const Json& s : t["scopes"]) e.scopes.push_back(parse_scope(s.get<std::string>()));
    e.created_unix_ms = t.value("created_unix_ms", int64_t{0});
    out.push_back(std::move(e));
  }
  return out;
}

std::string create_token(const std::string& path, const std::string& name, const std::vector<Scope>& scopes) {
  ANVIL_CHECK(!name.empty() && name.size() <= 64, "token name: expected 1-64 characters, got ", name.size());
  ANVIL_CHECK(!scopes.empty(), "token: expected at least one scope (train, serve, admin)");
  std::vector<TokenEntry> entries = read_token_file(path);
  ANVIL_CHECK(std::none_of(entries.begin(), entries.end(), [&](const TokenEntry& e) { return e.name == name; }),
              "token \"", name, "\" already exists in ", path, "; revoke it first or pick another name");
  const std::string token = "anvil_" + RandomHex(32);
  entries.push_back({name, sha256_hex(token), scopes, unix_millis()});
  Write(path, entries);
  return token;
}

bool revoke_token(const std::string& path, const std::string& name) {
  std::vector<TokenEntry> entries = read_token_file(path);
  const auto it = std::remove_if(entries.begin(), entries.end(), [&](const TokenEntry& e) { return e.name == name; });
  if (it == entries.end()) return false;
  entries.erase(it, entries.end());
  Write(path, entries);
  return true;
}

TokenSet::TokenSet(std::string path) : path_(std::move(path)) {
  MutexLock lock(&mu_);
  ReloadIfChanged();
}

void TokenSet::ReloadIfChanged() {
  const auto now = std::chrono::steady_clock::now();
  if (mtime_ns_ != -1 && now - checked_ < std::chrono::seconds(1)) return;
  checked_ = now;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    entries_.clear();
    mtime_ns_ = 0;
    size_ = -1;
    // Removed while authentication was on: fail closed (an operator restarts to turn it off).
    if (had_tokens_) error_ = "the token file " + path_ + " was removed";
    return;
  }
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (mtime == mtime_ns_ && st.st_size == size_) return;
  mtime_ns_ = mtime;
  size_ = st.st_size;
  // A file that exists but cannot be read never turns authentication off: no token is
  // accepted until it is fixed.
  try {
    entries_ = read_token_file(path_);
    error_.clear();
    had_tokens_ = had_tokens_ || !entries_.empty();
  } catch (const std::exception& e) {
    entries_.clear();
    error_ = e.what();
  }
}

bool TokenSet::enabled() {
  MutexLock lock(&mu_);
  ReloadIfChanged();
  return RequiredLocked();
}

std::string TokenSet::error() {
  MutexLock lock(&mu_);
  ReloadIfChanged();
  return error_;
}

TokenSet::Verdict TokenSet::check(const std::string* token) {
  MutexLock lock(&mu_);
  ReloadIfChanged();
  Verdict v;
  v.required = RequiredLocked();
  v.file_error = error_;
  if (!v.required || token == nullptr) return v;
  const std::string hash = sha256_hex(*token);
  for (const TokenEntry& e : entries_) {
    if (ConstantTimeEqual(e.sha256, hash)) v.entry = e;  // no early exit
  }
  return v;
}

}  // namespace anvil::server
