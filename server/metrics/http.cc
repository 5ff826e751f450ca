#include "server/metrics/http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <tuple>
#include <vector>

#include "core/util/error.h"

namespace anvil::server::metrics {
namespace {

using Clock = std::chrono::steady_clock;

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Internal Server Error";
  }
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The parts of a request head this server reads.
struct Head {
  bool ok = false;
  std::string method, path;
  bool http10 = false, close = false, keep_alive = false, body = false;
};

Head Parse(const std::string& text) {
  Head h;
  const size_t line_end = text.find("\r\n");
  const std::string line = text.substr(0, line_end);
  const size_t a = line.find(' '), b = line.rfind(' ');
  if (a == std::string::npos || b == a) return h;
  h.method = line.substr(0, a);
  const std::string target = line.substr(a + 1, b - a - 1);
  const std::string version = line.substr(b + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return h;
  if (target.empty() || target[0] != '/') return h;
  h.path = target.substr(0, target.find('?'));
  h.http10 = version == "HTTP/1.0";
  for (size_t at = line_end + 2; at < text.size();) {
    const size_t end = text.find("\r\n", at);
    if (end == std::string::npos || end == at) break;
    const std::string header = text.substr(at, end - at);
    at = end + 2;
    const size_t colon = header.find(':');
    if (colon == std::string::npos) return h;
    const std::string name = Lower(Trim(header.substr(0, colon)));
    const std::string value = Lower(Trim(header.substr(colon + 1)));
    if (name == "connection") {
      h.close = h.close || value.find("close") != std::string::npos;
      h.keep_alive = h.keep_alive || value.find("keep-alive") != std::string::npos;
    } else if ((name == "content-length" && value != "0") || name == "transfer-encoding") {
      h.body = true;  // never read: the connection closes after the reply
    }
  }
  h.ok = true;
  return h;
}

}  // namespace

struct HttpEndpoint::Connection {
  uint64_t id = 0;
  int fd = -1;
  std::string in;   // the request head so far
  std::string out;  // the reply not yet written
  size_t written = 0;
  bool writing = false, close_after = false;
  Clock::time_point deadline, last_activity;
};

HttpEndpoint::HttpEndpoint(Registry& registry, const std::string& address) : registry_(registry) {
  const size_t colon = address.rfind(':');
  int port = -1;
  std::string host;
  if (colon != std::string::npos && colon + 1 < address.size()) {
    host = address.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    try {
      size_t used = 0;
      port = std::stoi(address.substr(colon + 1), &used);
      if (used != address.size() - colon - 1 || port < 0 || port > 65535) port = -1;
    } catch (const std::exception&) {
      port = -1;
    }
  }
  ANVIL_CHECK(port >= 0 && !host.empty(), "metrics: cannot listen on ", address, " (expected host:port)");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  ANVIL_CHECK(::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0 && found != nullptr,
              "metrics: cannot listen on ", address, " (the host does not resolve)");
  for (const addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  ANVIL_CHECK(listen_fd_ >= 0, "metrics: cannot listen on ", address, " (in use, or not an address of this machine)");
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ANVIL_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0, "metrics: epoll/eventfd: ", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // the listening socket
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = 1;  // the wake-up
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  loop_ = std::thread([this] { Loop(); });
}

HttpEndpoint::~HttpEndpoint() {
  stop_ = true;
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  loop_.join();
  for (auto& [id, c] : conns_) ::close(c->fd);
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void HttpEndpoint::add_page(const std::string& path, Page page) {
  MutexLock lock(&pages_mu_);
  pages_[path] = std::make_shared<const Page>(std::move(page));
}

void HttpEndpoint::Loop() {
  std::vector<epoll_event> events(64);
  uint64_t next_id = 2;
  while (!stop_.load()) {
    // Sleep until the nearest deadline (at most a second: the stop flag is also re-read).
    auto now = Clock::now();
    auto wait = std::chrono::milliseconds(1000);
    if (accept_paused_until_ != Clock::time_point{}) {
      if (now >= accept_paused_until_) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = 0;
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
        accept_paused_until_ = {};
      } else {
        wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(accept_paused_until_ - now) +
                                  std::chrono::milliseconds(1));
      }
    }
    for (const auto& [id, c] : conns_) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(c->deadline - now) +
                                std::chrono::milliseconds(1));
    }
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(std::max<int64_t>(0, wait.count())));
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == 0) {
        // Accept every pending connection; beyond the bound, the quietest one makes room.
        while (true) {
          const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) {
            // Out of fds (a flood on the gRPC port can take them all): the listener stays
            // readable, so stop watching it for a while instead of spinning on accept4.
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
              epoll_event paused{};
              paused.data.u64 = 0;
              ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &paused);
              accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
            }
            break;
          }
          if (conns_.size() >= kMaxConnections) {
            auto quietest = conns_.begin();
            for (auto it = conns_.begin(); it != conns_.end(); ++it) {
              if (it->second->last_activity < quietest->second->last_activity) quietest = it;
            }
            Close(quietest->first);
          }
          auto c = std::make_unique<Connection>();
          c->id = next_id++;
          c->fd = fd;
          c->last_activity = Clock::now();
          c->deadline = c->last_activity + kHeadTimeout;
          epoll_event ev{};
          ev.events = EPOLLIN | EPOLLRDHUP;
          ev.data.u64 = c->id;
          ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
          conns_[c->id] = std::move(c);
          open_ = conns_.size();
        }
        continue;
      }
      if (id == 1) {
        uint64_t drained;
        (void)!::read(wake_fd_, &drained, sizeof(drained));
        continue;
      }
      const auto it = conns_.find(id);
      if (it == conns_.end()) continue;  // closed earlier in this round
      Connection& c = *it->second;
      if (c.writing) {
        if (events[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) OnWritable(c);
      } else {
        OnReadable(c);
      }
    }
    now = Clock::now();
    std::vector<uint64_t> expired;
    for (const auto& [id, c] : conns_) {
      if (c->deadline <= now) expired.push_back(id);
    }
    for (uint64_t id : expired) Close(id);
  }
}

void HttpEndpoint::OnReadable(Connection& c) {
  char buf[4096];
  while (true) {
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n == 0) {
      Close(c.id);
      return;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      Close(c.id);
      return;
    }
    const auto now = Clock::now();
    // The first byte of a request starts its head's clock; more bytes never extend it.
    if (c.in.empty()) c.deadline = std::min(c.deadline, now + kHeadTimeout);
    c.last_activity = now;
    c.in.append(buf, static_cast<size_t>(n));
    const size_t end = c.in.find("\r\n\r\n");
    if (end != std::string::npos) {
      // Bytes past the head (a body, or a pipelined request) are not read: reply, then close.
      if (end + 4 != c.in.size()) c.close_after = true;
      Respond(c, c.in.substr(0, end + 4));
      return;
    }
    if (c.in.size() > kMaxHeadBytes) {
      c.close_after = true;
      Respond(c, "");
      return;
    }
  }
}

std::pair<std::string, std::string> HttpEndpoint::Render(const std::string& path, int* status) {
  *status = 200;
  if (path == "/metrics") return {"text/plain; version=0.0.4; charset=utf-8", registry_.render()};
  std::shared_ptr<const Page> page;
  {
    MutexLock lock(&pages_mu_);
    const auto it = pages_.find(path);
    if (it != pages_.end()) page = it->second;
  }
  if (page == nullptr) {
    *status = 404;
    return {"text/plain; charset=utf-8", "not found: try /metrics or /\n"};
  }
  // A page that throws is the server's fault, said as such; the endpoint keeps serving.
  try {
    return (*page)();
  } catch (const std::exception& e) {
    *status = 500;
    return {"text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n"};
  }
}

void HttpEndpoint::Respond(Connection& c, const std::string& head_text) {
  int status = 200;
  std::string type = "text/plain; charset=utf-8", body, extra;
  const Head h = head_text.empty() ? Head{} : Parse(head_text);
  bool send_body = true;
  if (head_text.empty()) {
    status = 431;
    body = "the request head is over " + std::to_string(kMaxHeadBytes) + " bytes\n";
  } else if (!h.ok) {
    status = 400;
    body = "malformed request: expected \"GET /path HTTP/1.1\" and headers\n";
    c.close_after = true;
  } else if (h.method == "GET" || h.method == "HEAD") {
    std::tie(type, body) = Render(h.path, &status);
    send_body = h.method == "GET";
  } else {
    status = 405;
    body = "only GET and HEAD are served\n";
    extra = "Allow: GET, HEAD\r\n";
  }
  // An error ends the connection too: a client that sent a bad request may be out of step.
  if (h.body || h.close || (h.http10 && !h.keep_alive) || status >= 400) c.close_after = true;
  c.out = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) + "\r\nContent-Type: " + type +
          "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nCache-Control: no-store\r\n" + extra +
          "Connection: " + (c.close_after ? "close" : "keep-alive") + "\r\n\r\n";
  if (send_body) c.out += body;
  c.written = 0;
  c.in.clear();
  c.writing = true;
  c.deadline = Clock::now() + kWriteTimeout;
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.u64 = c.id;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  OnWritable(c);
}

void HttpEndpoint::OnWritable(Connection& c) {
  while (c.written < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // the rest when the socket drains
      if (errno == EINTR) continue;
      Close(c.id);
      return;
    }
    c.written += static_cast<size_t>(n);
    c.last_activity = Clock::now();
  }
  if (c.close_after) {
    Close(c.id);
    return;
  }
  // Kept alive: the next request's head is awaited for the idle time.
  c.out.clear();
  c.writing = false;
  c.deadline = Clock::now() + kIdleTimeout;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = c.id;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void HttpEndpoint::Close(uint64_t id) {
  const auto it = conns_.find(id);
  if (it == conns_.end()) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second->fd, nullptr);
  ::close(it->second->fd);
  conns_.erase(it);
  open_ = conns_.size();
}

}  // namespace anvil::server::metrics
