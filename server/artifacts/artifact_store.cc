// Choosing the artifact store's engine, and the keys every engine accepts: see artifact_store.h.
#include "server/artifacts/artifact_store.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "server/artifacts/file_artifacts.h"
#include "server/artifacts/s3_artifacts.h"

namespace fs = std::filesystem;

namespace anvil::server {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

std::string temporary_suffix() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s = ".tmp.";
  for (int i = 0; i < 6; ++i) s += kChars[rng() % 62];
  return s;
}

void check_artifact_key(const std::string& key) {
  bool ok = !key.empty() && key.size() <= 512 && key.front() != '/' && key.back() != '/';
  size_t segment_start = 0;
  for (size_t i = 0; ok && i <= key.size(); ++i) {
    if (i == key.size() || key[i] == '/') {
      const std::string segment = key.substr(segment_start, i - segment_start);
      ok = !segment.empty() && segment != "." && segment != "..";
      segment_start = i + 1;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(key[i]);
    ok = std::isalnum(c) || c == '.' || c == '_' || c == '-';
  }
  if (!ok) {
    throw ArtifactError("artifact key \"" + key.substr(0, 80) +
                        "\": expected a relative path of letters, digits, '.', '_' and '-' segments");
  }
}

std::unique_ptr<ArtifactStore> open_artifact_store(const std::string& location, const std::string& data_root,
                                                   const ArtifactOptions& options) {
  if (location.empty()) return std::make_unique<FileArtifactStore>(data_root);
  if (location.rfind("s3://", 0) == 0) {
    S3Location where = parse_s3_location(location);
    where.endpoint = !options.s3_endpoint.empty() ? options.s3_endpoint : Env("AWS_ENDPOINT_URL");
    if (const std::string region = !Env("AWS_REGION").empty() ? Env("AWS_REGION") : Env("AWS_DEFAULT_REGION");
        !region.empty()) {
      where.region = region;
    }
    if (where.endpoint.empty()) where.endpoint = "https://s3." + where.region + ".amazonaws.com";
    while (!where.endpoint.empty() && where.endpoint.back() == '/') where.endpoint.pop_back();
    // Only a scheme, a host and a port: the endpoint is named in messages and logs, so it must
    // carry no credentials (they come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).
    const bool scheme_ok = where.endpoint.rfind("http://", 0) == 0 || where.endpoint.rfind("https://", 0) == 0;
    if (!scheme_ok || where.endpoint.find_first_of("@?#") != std::string::npos ||
        where.endpoint.find('/', where.endpoint.find("://") + 3) != std::string::npos) {
      throw ArtifactError("S3 endpoint: expected http://HOST[:PORT] or https://HOST[:PORT] (no user, path or query)");
    }
    where.access_key = Env("AWS_ACCESS_KEY_ID");
    where.secret_key = Env("AWS_SECRET_ACCESS_KEY");
    where.session_token = Env("AWS_SESSION_TOKEN");
    if (where.access_key.empty() || where.secret_key.empty()) {
      throw ArtifactError("artifact store " + location +
                          ": expected credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
    }
    where.timeout_s = options.timeout_s;
    return std::make_unique<S3ArtifactStore>(std::move(where));
  }
  std::string path = location;
  if (path.rfind("file://", 0) == 0) path = path.substr(7);
  if (path.find("://") != std::string::npos || path.empty()) {
    throw ArtifactError("artifact store \"" + location + "\": expected a folder, file:///PATH or s3://BUCKET[/PREFIX]");
  }
  return std::make_unique<FileArtifactStore>(fs::absolute(path).lexically_normal().string());
}

}  // namespace anvil::server
