#include "server/metrics/http.h"

#include <httplib.h>

#include <chrono>
#include <exception>

#include "core/util/error.h"

namespace anvil::server::metrics {
namespace {

// Threads enough that idle or half-open connections cannot take them all (each holds one
// until its request arrives or the read times out).
constexpr int kThreads = 16;
constexpr time_t kTimeoutSeconds = 5;
// No request this endpoint serves has a body: a larger one is refused unread.
constexpr size_t kMaxRequestBytes = 64 * 1024;

void Reply(httplib::Response& res, int status, const std::string& type, const std::string& body) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(body, type);
}

}  // namespace

HttpEndpoint::HttpEndpoint(Registry& registry, const std::string& address)
    : registry_(registry), server_(std::make_unique<httplib::Server>()) {
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

  server_->new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  server_->set_read_timeout(kTimeoutSeconds, 0);
  server_->set_write_timeout(kTimeoutSeconds, 0);
  server_->set_keep_alive_timeout(kTimeoutSeconds);
  server_->set_payload_max_length(kMaxRequestBytes);
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    Reply(res, 200, "text/plain; version=0.0.4; charset=utf-8", registry_.render());
  });
  server_->Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<const Page> page;
    {
      std::lock_guard<std::mutex> lock(pages_mu_);
      const auto it = pages_.find(req.path);
      if (it != pages_.end()) page = it->second;
    }
    if (page == nullptr) {
      Reply(res, 404, "text/plain; charset=utf-8", "not found: try /metrics or /\n");
      return;
    }
    const auto [type, body] = (*page)();
    Reply(res, 200, type, body);
  });
  const httplib::Server::Handler not_allowed = [](const httplib::Request&, httplib::Response& res) {
    Reply(res, 405, "text/plain; charset=utf-8", "only GET and HEAD are served\n");
    res.set_header("Allow", "GET, HEAD");
  };
  server_->Post(".*", not_allowed);
  server_->Put(".*", not_allowed);
  server_->Patch(".*", not_allowed);
  server_->Delete(".*", not_allowed);
  server_->Options(".*", not_allowed);
  // A page that throws is the server's fault, said as such; the endpoint keeps serving.
  server_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr e) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    Reply(res, 500, "text/plain; charset=utf-8", "internal error: " + what + "\n");
  });

  port_ = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  ANVIL_CHECK(port_ > 0, "metrics: cannot listen on ", address, " (in use, or not an address of this machine)");
  listener_ = std::thread([this] {
    server_->listen_after_bind();
    listening_done_ = true;
  });
}

void HttpEndpoint::add_page(const std::string& path, Page page) {
  std::lock_guard<std::mutex> lock(pages_mu_);
  pages_[path] = std::make_shared<const Page>(std::move(page));
}

HttpEndpoint::~HttpEndpoint() {
  // stop() acts only on a server that is already listening: repeat it until the listener is
  // out, so a destructor right after the constructor cannot miss it.
  while (!listening_done_.load()) {
    server_->stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  listener_.join();
}

}  // namespace anvil::server::metrics
