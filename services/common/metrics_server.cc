#include "services/common/metrics_server.h"

#include <sys/socket.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "httplib.h"

namespace spotdnn::services {

absl::StatusOr<HostPort> ParseHostPort(absl::string_view field, absl::string_view value) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = \"", value, "\": ", why,
                                                   " (expected HOST:PORT, e.g. 0.0.0.0:9090)"));
  };
  const size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos) return bad("no port");
  HostPort out;
  absl::string_view host = value.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) return bad("no host");
  out.host = std::string(host);
  if (!absl::SimpleAtoi(value.substr(colon + 1), &out.port) || out.port < 0 || out.port > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    absl::string_view field, absl::string_view listen, const metrics::Registry& registry) {
  absl::StatusOr<HostPort> address = ParseHostPort(field, listen);
  if (!address.ok()) return address.status();
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->server_ = std::make_unique<httplib::Server>();
  server->host_ = address->host;
  httplib::Server& http = *server->server_;
  // A scrape now and then: two threads are plenty.
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  // httplib's default also sets SO_REUSEPORT, with which a second process given the same address
  // would share it silently instead of failing: SO_REUSEADDR only (a restart may rebind at once).
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http.Get("/metrics", [&registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  const int port = address->port == 0
                       ? http.bind_to_any_port(address->host)
                       : (http.bind_to_port(address->host, address->port) ? address->port : -1);
  if (port <= 0) {
    return absl::UnavailableError(absl::StrCat(
        field, " = \"", listen, "\": cannot listen there (address invalid or in use)"));
  }
  server->port_ = port;
  httplib::Server* raw = server->server_.get();
  server->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  // httplib's stop() does nothing until the listen loop runs (and the loop would then never end):
  // return only once it runs, so that destroying the server right away cannot hang.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!raw->is_running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  return server;
}

MetricsServer::~MetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace spotdnn::services
