// The metrics address: a small HTTP/1.1 server serving `/metrics` in the Prometheus text
// format from a Registry, and any pages added (the status page). GET and HEAD only; any other
// method is 405 with `Allow: GET, HEAD`.
//
// Why its own event loop rather than a thread per connection: a scrape must not wait behind
// clients that are slow on purpose. With a thread (or a pool slot) per connection, 40 clients
// sending one header line every 2 s, or 64 idle connections, held every thread and delayed
// scrapes by 11-17 s. Here one thread multiplexes every connection (epoll), and each holds a
// buffer, never a thread:
//   - the whole request head must arrive within kHeadTimeout of the connection becoming ready
//     for a request (not per read: a byte every second does not extend it), else it is closed;
//   - an idle keep-alive connection is closed after kIdleTimeout, a response not taken by the
//     client within kWriteTimeout likewise;
//   - at most kMaxConnections are open; a new one beyond that evicts the connection that has
//     been quiet longest;
//   - a head over kMaxHeadBytes is 431, a request with a body is answered and closed unread;
//   - out of fds (EMFILE), accepting pauses for 100 ms at a time instead of spinning.
// Pages run on the loop thread: they are fast (the registry's text, a bounded status page).
//
// Thread-safety: add_page may be called from any thread; everything else is the loop's.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "core/util/mutex.h"
#include "server/metrics/registry.h"

namespace anvil::server::metrics {

class HttpEndpoint {
 public:
  static constexpr std::chrono::milliseconds kHeadTimeout{3000};
  static constexpr std::chrono::milliseconds kIdleTimeout{10000};
  static constexpr std::chrono::milliseconds kWriteTimeout{10000};
  static constexpr size_t kMaxConnections = 256;
  static constexpr size_t kMaxHeadBytes = 16 * 1024;

  // Listens on `address` ("127.0.0.1:9464", "[::1]:0"; port 0 picks a free one). Throws on failure.
  HttpEndpoint(Registry& registry, const std::string& address);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  int port() const { return port_; }
  Registry& registry() { return registry_; }

  // Serves GET `path` (exactly) with what `page` returns: {content type, body}.
  using Page = std::function<std::pair<std::string, std::string>()>;
  void add_page(const std::string& path, Page page);

  // Connections open now (for tests and the loop's own bound).
  size_t connections() const { return open_.load(); }

 private:
  struct Connection;
  void Loop();
  void Accept();
  void OnReadable(Connection& c);
  void OnWritable(Connection& c);
  void Respond(Connection& c, const std::string& head_text);
  void Close(uint64_t id);
  std::pair<std::string, std::string> Render(const std::string& path, int* status);

  Registry& registry_;
  Mutex pages_mu_;
  std::map<std::string, std::shared_ptr<const Page>> pages_ ABSL_GUARDED_BY(pages_mu_);
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  int port_ = 0;
  std::map<uint64_t, std::unique_ptr<Connection>> conns_;  // the loop's, by id (ids are never reused)
  std::atomic<size_t> open_{0};
  std::atomic<bool> stop_{false};
  // Set while accepting is paused after the process ran out of fds (the loop's).
  std::chrono::steady_clock::time_point accept_paused_until_{};
  std::thread loop_;
};

}  // namespace anvil::server::metrics
