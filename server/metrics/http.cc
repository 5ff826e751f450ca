#include "server/metrics/http.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>

#include "core/util/error.h"

// NOTE [ civetweb's thread stacks ]
// Debian's civetweb is built with a fixed 100 KiB stack per thread (USE_STACK_SIZE), and a
// thread's static TLS is carved out of its stack. With the CUDA runtime linked in (its TLS
// block is page-aligned) there was too little left: requests crashed inside civetweb's own
// code before reaching ours, and a library with a large TLS made mg_start fail outright.
// This definition interposes on the C library's for the whole process (the executable's
// symbol wins over libc's for every shared library): requests for stacks under 1 MiB get
// 1 MiB. Nothing else in the process asks for such small stacks.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kMinStack = size_t{1} << 20;
  return real(attr, size < kMinStack ? kMinStack : size);
}

namespace anvil::server::metrics {
namespace {

// A HEAD request gets the headers only.
void Send(mg_connection* conn, int code, const char* reason, const std::string& type, const std::string& body,
          bool head = false, const char* extra_headers = "") {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
            "%sConnection: close\r\n\r\n",
            code, reason, type.c_str(), body.size(), extra_headers);
  if (!head) mg_write(conn, body.data(), body.size());
}

}  // namespace

// Every request comes here (one handler on "/"), and unknown paths get a 404 written here:
// civetweb's own error page path crashed in Debian's build (mg_send_http_error, SIGSEGV).
int HttpEndpoint::Dispatch(mg_connection* conn, void* data) {
  auto* self = static_cast<HttpEndpoint*>(data);
  const mg_request_info* info = mg_get_request_info(conn);
  const std::string path = info != nullptr && info->local_uri != nullptr ? info->local_uri : "";
  const std::string method = info != nullptr && info->request_method != nullptr ? info->request_method : "";
  if (method != "GET" && method != "HEAD") {
    Send(conn, 405, "Method Not Allowed", "text/plain; charset=utf-8", "only GET and HEAD are served\n", false,
         "Allow: GET, HEAD\r\n");
    return 405;
  }
  const bool head = method == "HEAD";
  if (path == "/metrics") {
    Send(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", self->registry_.render(), head);
    return 200;
  }
  const auto page = self->pages_.find(path);
  if (page != self->pages_.end()) {
    const auto [type, body] = (*page->second)();
    Send(conn, 200, "OK", type, body, head);
    return 200;
  }
  Send(conn, 404, "Not Found", "text/plain; charset=utf-8", "not found: try /metrics or /\n", head);
  return 404;
}

void HttpEndpoint::add_page(const std::string& path, Page page) {
  pages_[path] = std::make_unique<Page>(std::move(page));
}

HttpEndpoint::HttpEndpoint(Registry& registry, const std::string& address) : registry_(registry) {
  // civetweb takes "host:port"; "127.0.0.1:0" lets the system choose the port.
  // Threads enough that idle or half-open connections cannot take them all (each holds one
  // until its request arrives), and a request timeout that drops such connections.
  const char* options[] = {"listening_ports",    address.c_str(), "num_threads", "16",
                           "request_timeout_ms", "5000",          nullptr};
  // Zeroed callbacks with room to spare: the library may know more callbacks than its header.
  static_assert(sizeof(mg_callbacks) <= 1024);
  alignas(alignof(std::max_align_t)) static const unsigned char kNoCallbacks[1024] = {};
  mg_init_data init{reinterpret_cast<const mg_callbacks*>(kNoCallbacks), this, options};
  unsigned code = 0;
  char text[256] = {0};
  mg_error_data error{&code, text, sizeof(text)};
  ctx_ = mg_start2(&init, &error);
  ANVIL_CHECK(ctx_ != nullptr, "metrics: cannot listen on ", address, " (",
              text[0] != '\0' ? text : "in use, or not host:port", ")");
  mg_set_request_handler(ctx_, "/", Dispatch, this);
  mg_server_port ports[1];
  if (mg_get_server_ports(ctx_, 1, ports) == 1) port_ = ports[0].port;
}

HttpEndpoint::~HttpEndpoint() {
  if (ctx_ == nullptr) return;
  // civetweb's listener sees the stop flag only when its poll (2 s timeout) returns: stop on
  // another thread and wake the poll with connections until the stop is done (10 ms, not 2 s).
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    mg_stop(ctx_);
    done = true;
  });
  while (!done.load()) {
    if (port_ > 0) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port_));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      ::close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stopper.join();
}

}  // namespace anvil::server::metrics
