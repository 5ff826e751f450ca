// The S3-compatible engine of the artifact store: see s3_artifacts.h.
#include "server/artifacts/s3_artifacts.h"

#include <curl/curl.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/util/file.h"
#include "core/util/sha256.h"
#include "server/artifacts/digest.h"
#include "server/log.h"

namespace fs = std::filesystem;

namespace anvil::server {
namespace {

// SHA-256 of no bytes: the payload hash of a request without a body.
constexpr char kEmptySha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr int kAttempts = 4;

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Response {
  long status = 0;
  CURLcode curl = CURLE_OK;
  std::string curl_error;
  std::string body;                            // unless the request had a sink
  std::map<std::string, std::string> headers;  // names lowercased
  std::exception_ptr sink_error;               // the sink threw (a local write failed): not retried
  // Whether another attempt may succeed: the server could not be reached or answered 5xx, the
  // connection broke, or it timed out. A refused certificate, a bad URL or a local failure
  // would fail the same way again.
  bool transient() const {
    if (sink_error) return false;
    switch (curl) {
      case CURLE_OK:
        return status >= 500;
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_CONNECT:
      case CURLE_OPERATION_TIMEDOUT:
      case CURLE_SEND_ERROR:
      case CURLE_RECV_ERROR:
      case CURLE_GOT_NOTHING:
      case CURLE_PARTIAL_FILE:
        return true;
      default:
        return false;
    }
  }
};

struct Request {
  std::string method = "GET";
  std::string url;
  std::vector<std::string> headers;
  std::string payload_sha256 = kEmptySha256;
  std::FILE* upload = nullptr;
  int64_t upload_size = 0;
  // Receives a 2xx body; a non-2xx body is kept in Response::body for the error message.
  std::function<void(const char*, size_t)> sink;
};

struct Transfer {
  const Request* request;
  Response* response;
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    // A new response (after a 100 Continue): its status decides where its body goes.
    t->response->headers.clear();
    const size_t sp = line.find(' ');
    t->response->status = sp == std::string::npos ? 0 : std::atol(line.c_str() + sp + 1);
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon), value = line.substr(colon + 1);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t b = value.find_first_not_of(" \t"), e = value.find_last_not_of(" \t\r\n");
    t->response->headers[name] = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  }
  return size * n;
}

// A 2xx body goes to the request's sink when it has one; anything else (listings, error
// documents) is kept, bounded.
size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  const long status = t->response->status;
  if (t->request->sink && status >= 200 && status < 300) {
    try {
      t->request->sink(data, bytes);
    } catch (...) {
      t->response->sink_error = std::current_exception();
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR); the error is rethrown after it
    }
    return bytes;
  }
  if (t->response->body.size() + bytes > (size_t{16} << 20)) return 0;
  t->response->body.append(data, bytes);
  return bytes;
}

size_t OnRead(char* out, size_t size, size_t n, void* user) {
  auto* f = static_cast<std::FILE*>(user);
  if (f == nullptr) return 0;
  return std::fread(out, size, n, f);
}

std::string XmlField(const std::string& xml, const std::string& tag, size_t from = 0, size_t* end = nullptr) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t b = xml.find(open, from);
  if (b == std::string::npos) return "";
  const size_t e = xml.find(close, b + open.size());
  if (e == std::string::npos) return "";
  if (end != nullptr) *end = e + close.size();
  std::string v = xml.substr(b + open.size(), e - b - open.size());
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != '&') {
      out += v[i];
      continue;
    }
    static const std::pair<const char*, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    bool matched = false;
    for (const auto& [name, c] : kEntities) {
      const size_t len = std::strlen(name);
      if (v.compare(i, len, name) == 0) {
        out += c;
        i += len - 1;
        matched = true;
        break;
      }
    }
    if (!matched) out += '&';
  }
  return out;
}

std::string Escape(const std::string& s) {
  std::string out;
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

class Client {
 public:
  explicit Client(const S3Location& where) : where_(where) { GlobalInit(); }

  // One attempt.
  Response Perform(const Request& r) const {
    Response response;
    char error[CURL_ERROR_SIZE] = {0};  // before the handle: its cleanup may still write here
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> h(curl_easy_init(), curl_easy_cleanup);
    if (!h) throw ArtifactError("s3: cannot create a curl handle");
    CURL* c = h.get();
    const std::string sigv4 = "aws:amz:" + where_.region + ":s3";
    curl_easy_setopt(c, CURLOPT_URL, r.url.c_str());
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    // Without SigV4 (a libcurl built without it) the credentials would go out as Basic
    // authentication: refuse instead.
    if (curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str()) != CURLE_OK) {
      throw ArtifactError("s3: this libcurl cannot sign requests with AWS SigV4 (needs curl 7.75 or newer)");
    }
    curl_easy_setopt(c, CURLOPT_USERNAME, where_.access_key.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, where_.secret_key.c_str());
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, static_cast<long>(std::max<int64_t>(1, where_.timeout_s / 5)));
    // A transfer may take as long as its size needs; one that stalls (under 1 KiB/s for the
    // timeout) is abandoned.
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(std::max<int64_t>(1, where_.timeout_s)));
    Transfer t{&r, &response};
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    struct curl_slist* headers = nullptr;
    std::vector<std::string> lines = r.headers;
    // The payload's digest, signed: S3 refuses a body that does not match it.
    lines.push_back("x-amz-content-sha256: " + r.payload_sha256);
    if (!where_.session_token.empty()) lines.push_back("x-amz-security-token: " + where_.session_token);
    // No "Expect:" line to turn off 100-continue: curl 7.88 would sign the header it removes.
    for (const std::string& line : lines) headers = curl_slist_append(headers, line.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    if (r.method == "HEAD") {
      curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (r.method == "PUT") {
      curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(c, CURLOPT_READFUNCTION, OnRead);
      curl_easy_setopt(c, CURLOPT_READDATA, r.upload);
      curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.upload_size));
    } else if (r.method != "GET") {
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    response.curl = curl_easy_perform(c);
    curl_slist_free_all(headers);
    if (response.sink_error) std::rethrow_exception(response.sink_error);
    if (response.curl != CURLE_OK) {
      response.curl_error = error[0] != 0 ? error : curl_easy_strerror(response.curl);
      return response;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
    return response;
  }

  // Retries transient failures; `before_attempt` resets what an attempt consumed.
  Response Send(const Request& r, const std::string& what, const std::function<void()>& before_attempt = {}) const {
    std::chrono::milliseconds pause(100);
    Response response;
    for (int attempt = 1;; ++attempt) {
      if (before_attempt) before_attempt();
      response = Perform(r);
      if (!response.transient() || attempt == kAttempts) break;
      std::this_thread::sleep_for(pause);
      pause *= 2;
    }
    if (response.curl != CURLE_OK) {
      throw ArtifactError(
          Describe() + ": " + what + ": " + response.curl_error + " (after " + std::to_string(kAttempts) + " attempts)",
          ArtifactError::Kind::kUnavailable);
    }
    return response;
  }

  [[noreturn]] void Fail(const Response& r, const std::string& what) const {
    const std::string code = XmlField(r.body, "Code"), message = XmlField(r.body, "Message");
    std::string text = Describe() + ": " + what + ": HTTP " + std::to_string(r.status);
    if (!code.empty()) text += " " + code;
    if (!message.empty()) text += ": " + message;
    ArtifactError::Kind kind = ArtifactError::Kind::kOther;
    if (r.status >= 500) kind = ArtifactError::Kind::kUnavailable;
    if (r.status == 404 && code != "NoSuchBucket") kind = ArtifactError::Kind::kNotFound;
    if (r.status == 403) text += " (check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)";
    throw ArtifactError(text, kind);
  }

  std::string Describe() const { return "s3 " + where_.endpoint + "/" + where_.bucket + "/" + where_.prefix; }

 private:
  const S3Location& where_;
};

}  // namespace

S3Location parse_s3_location(const std::string& location) {
  constexpr std::string_view kScheme = "s3://";
  if (location.rfind(kScheme, 0) != 0) {
    throw ArtifactError("artifact store \"" + location + "\": expected s3://BUCKET[/PREFIX]");
  }
  S3Location where;
  const std::string rest = location.substr(kScheme.size());
  const size_t slash = rest.find('/');
  where.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) where.prefix = rest.substr(slash + 1);
  while (!where.prefix.empty() && where.prefix.back() == '/') where.prefix.pop_back();
  if (!where.prefix.empty()) {
    check_artifact_key(where.prefix);
    where.prefix += "/";
  }
  bool bucket_ok = where.bucket.size() >= 3 && where.bucket.size() <= 63;
  for (char c : where.bucket) {
    bucket_ok = bucket_ok && (std::islower(static_cast<unsigned char>(c)) ||
                              std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.');
  }
  if (!bucket_ok) {
    throw ArtifactError("artifact store \"" + location +
                        "\": expected a bucket name of 3-63 lowercase letters, digits, '-' or '.'");
  }
  return where;
}

S3ArtifactStore::S3ArtifactStore(S3Location where) : where_(std::move(where)) {
  Client client(where_);
  Request head;
  head.method = "HEAD";
  head.url = where_.endpoint + "/" + where_.bucket;
  const Response r = client.Send(head, "checking the bucket");
  if (r.status == 404) {
    // A bucket of its own, made on first start (CreateBucket; outside us-east-1 it names its
    // region). One that cannot be made (refused, a name taken by another account) is an error.
    const std::string body =
        where_.region == "us-east-1"
            ? ""
            : "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>" +
                  where_.region + "</LocationConstraint></CreateBucketConfiguration>";
    std::unique_ptr<std::FILE, decltype(&std::fclose)> in(
        body.empty() ? nullptr : ::fmemopen(const_cast<char*>(body.data()), body.size(), "rb"), std::fclose);
    Request create;
    create.method = "PUT";
    create.url = head.url;
    create.upload = in.get();
    create.upload_size = static_cast<int64_t>(body.size());
    create.payload_sha256 = sha256_hex(body);
    const Response made = client.Send(create, "creating the bucket", [&] {
      if (in) std::fseek(in.get(), 0, SEEK_SET);
    });
    if (made.status == 409 && XmlField(made.body, "Code") == "BucketAlreadyOwnedByYou") return;
    if (made.status < 200 || made.status >= 300) {
      client.Fail(made, "the bucket \"" + where_.bucket + "\" does not exist and could not be created");
    }
    log(LogLevel::kInfo, "artifacts: created the bucket \"", where_.bucket, "\" at ", where_.endpoint);
    return;
  }
  if (r.status < 200 || r.status >= 300) client.Fail(r, "checking the bucket");
}

std::string S3ArtifactStore::describe() const { return Client(where_).Describe(); }

std::string S3ArtifactStore::ObjectUrl(const std::string& key) const {
  check_artifact_key(key);
  return where_.endpoint + "/" + where_.bucket + "/" + where_.prefix + key;
}

std::optional<ArtifactInfo> S3ArtifactStore::stat(const std::string& key) {
  Client client(where_);
  Request head;
  head.method = "HEAD";
  head.url = ObjectUrl(key);
  const Response r = client.Send(head, "HEAD " + key);
  if (r.status == 404) return std::nullopt;
  if (r.status < 200 || r.status >= 300) client.Fail(r, "HEAD " + key);
  ArtifactInfo info;
  const auto sha = r.headers.find("x-amz-meta-sha256");
  const auto length = r.headers.find("content-length");
  if (sha != r.headers.end()) info.sha256 = sha->second;
  if (length != r.headers.end()) info.bytes = std::atoll(length->second.c_str());
  return info;
}

ArtifactInfo S3ArtifactStore::publish(const std::string& key, const std::string& local_path) {
  Client client(where_);
  ArtifactInfo info;
  std::error_code ec;
  info.bytes = static_cast<int64_t>(fs::file_size(local_path, ec));
  if (ec) throw ArtifactError(local_path + ": cannot read: " + ec.message(), ArtifactError::Kind::kNotFound);
  info.sha256 = sha256_file(local_path);
  if (const std::optional<ArtifactInfo> existing = stat(key)) {
    if (existing->sha256 == info.sha256) return info;
    throw ArtifactError(client.Describe() + ": " + key + " exists with other bytes (SHA-256 " +
                            existing->sha256.substr(0, 12) + "…); objects are written once",
                        ArtifactError::Kind::kExists);
  }
  std::unique_ptr<std::FILE, decltype(&std::fclose)> file(std::fopen(local_path.c_str(), "rb"), std::fclose);
  if (!file) throw ArtifactError(local_path + ": cannot open: " + errno_message(errno));
  const std::string temp_key = key + temporary_suffix();
  // Removed however the publish ends (a PUT whose answer was lost may have stored it).
  struct RemoveTemp {
    S3ArtifactStore* self;
    std::string key;
    ~RemoveTemp() {
      try {
        self->remove(key);
      } catch (...) {  // a leftover temporary key is harmless: lists skip ".tmp." keys
      }
    }
  } remove_temp{this, temp_key};
  Request put;
  put.method = "PUT";
  put.url = ObjectUrl(temp_key);
  put.upload = file.get();
  put.upload_size = info.bytes;
  put.payload_sha256 = info.sha256;
  put.headers = {"x-amz-meta-sha256: " + info.sha256, "Content-Type: application/octet-stream"};
  Response r = client.Send(put, "PUT " + temp_key, [&] { std::fseek(file.get(), 0, SEEK_SET); });
  if (r.status < 200 || r.status >= 300) client.Fail(r, "PUT " + temp_key);
  // Publish: one server-side copy makes the key appear whole; the temporary key goes after.
  Request copy;
  copy.method = "PUT";
  copy.url = ObjectUrl(key);
  copy.headers = {"x-amz-copy-source: /" + where_.bucket + "/" + where_.prefix + temp_key,
                  "x-amz-metadata-directive: COPY"};
  r = client.Send(copy, "publish " + key);
  // A copy can fail after its 200 (the error is then in the body).
  if (r.status < 200 || r.status >= 300 || r.body.find("<Error>") != std::string::npos) {
    client.Fail(r, "publish " + key);
  }
  return info;
}

ArtifactInfo S3ArtifactStore::Download(const std::string& key, const std::string& local_path,
                                       const std::string& expected_sha256) {
  Client client(where_);
  std::error_code ec;
  fs::create_directories(fs::path(local_path).parent_path(), ec);
  std::unique_ptr<AtomicFile> out;
  std::unique_ptr<Digest> hash;
  int64_t bytes = 0;
  Request get;
  get.url = ObjectUrl(key);
  get.sink = [&](const char* data, size_t n) {
    out->write(data, n);
    hash->update(data, n);
    bytes += static_cast<int64_t>(n);
  };
  Response r;
  try {
    r = client.Send(get, "GET " + key, [&] {
      out = std::make_unique<AtomicFile>(local_path);
      hash = std::make_unique<Digest>();
      bytes = 0;
    });
  } catch (const ArtifactError&) {
    throw;
  } catch (const std::exception& e) {  // the local copy could not be written (a full disk)
    throw ArtifactError("artifact " + key + ": writing its local copy failed: " + e.what());
  }
  if (r.status == 404) throw ArtifactError("artifact " + key + " is missing", ArtifactError::Kind::kNotFound);
  if (r.status < 200 || r.status >= 300) client.Fail(r, "GET " + key);
  ArtifactInfo info{bytes, hash->hex()};
  const auto recorded = r.headers.find("x-amz-meta-sha256");
  for (const std::string& want : {recorded == r.headers.end() ? std::string() : recorded->second, expected_sha256}) {
    if (!want.empty() && want != info.sha256) {
      throw ArtifactError("artifact " + key + " is corrupt (SHA-256 " + info.sha256.substr(0, 12) + "…, recorded " +
                              want.substr(0, 12) + "…)",
                          ArtifactError::Kind::kCorrupt);
    }
  }
  if (recorded == r.headers.end()) {
    throw ArtifactError("artifact " + key + " carries no SHA-256 (not written by anvild)",
                        ArtifactError::Kind::kCorrupt);
  }
  out->commit();
  return info;
}

std::string S3ArtifactStore::open(const std::string& key, const std::string& cache_path,
                                  const std::string& expected_sha256) {
  // A cached copy that matches the digest its caller holds needs no request.
  std::error_code ec;
  if (!expected_sha256.empty() && fs::exists(cache_path, ec) && sha256_file(cache_path) == expected_sha256) {
    return cache_path;
  }
  Download(key, cache_path, expected_sha256);
  return cache_path;
}

ArtifactInfo S3ArtifactStore::fetch_to(const std::string& key, const std::string& local_path) {
  return Download(key, local_path, "");
}

std::vector<std::string> S3ArtifactStore::list(const std::string& prefix) {
  Client client(where_);
  std::vector<std::string> keys;
  std::string token;
  for (;;) {
    Request get;
    // The query's parameters in sorted order: curl 7.88 signs the query as given, and SigV4's
    // canonical form sorts them.
    get.url = where_.endpoint + "/" + where_.bucket + "?" +
              (token.empty() ? "" : "continuation-token=" + Escape(token) + "&") + "list-type=2&" +
              (where_.list_page_size > 0 ? "max-keys=" + std::to_string(where_.list_page_size) + "&" : "") +
              "prefix=" + Escape(where_.prefix + prefix);
    const Response r = client.Send(get, "list " + prefix);
    if (r.status < 200 || r.status >= 300) client.Fail(r, "list " + prefix);
    size_t at = 0, end = 0;
    for (;;) {
      const size_t open = r.body.find("<Contents>", at);
      if (open == std::string::npos) break;
      std::string key = XmlField(r.body, "Key", open, &end);
      at = std::max(end, open + 1);
      if (key.rfind(where_.prefix, 0) != 0) continue;
      key = key.substr(where_.prefix.size());
      if (key.find(".tmp.") == std::string::npos) keys.push_back(key);
    }
    if (XmlField(r.body, "IsTruncated") != "true") break;
    token = XmlField(r.body, "NextContinuationToken");
    if (token.empty()) break;
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

void S3ArtifactStore::remove(const std::string& key) {
  Client client(where_);
  Request del;
  del.method = "DELETE";
  del.url = ObjectUrl(key);
  const Response r = client.Send(del, "DELETE " + key);
  if ((r.status < 200 || r.status >= 300) && r.status != 404) client.Fail(r, "DELETE " + key);
}

}  // namespace anvil::server
