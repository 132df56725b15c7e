// Serves a metrics registry (metrics.h) over HTTP: GET /metrics answers the Prometheus text
// format. What a service main's --metrics_listen starts.
#ifndef SPOTDNN_SERVICES_COMMON_METRICS_SERVER_H_
#define SPOTDNN_SERVICES_COMMON_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/common/metrics.h"

namespace httplib {
class Server;
}

namespace spotdnn::services {

// A host and port parsed from "HOST:PORT" ("[::1]:9090" for IPv6).
struct HostPort {
  std::string host;
  int port = 0;
};

// Parses "HOST:PORT" (port 0..65535; 0 picks a free one). INVALID_ARGUMENT naming `field` and
// the value otherwise.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view field, absl::string_view value);

// An HTTP server answering GET /metrics with `registry` rendered (404 for other paths).
class MetricsServer {
 public:
  // Binds `listen` (checked by ParseHostPort, named `field` in errors) and serves on a thread.
  // INVALID_ARGUMENT for a bad value; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(absl::string_view field,
                                                              absl::string_view listen,
                                                              const metrics::Registry& registry);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port bound (the one picked for port 0).
  int port() const { return port_; }
  // The host it serves on, as given.
  const std::string& host() const { return host_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string host_;
  int port_ = 0;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_METRICS_SERVER_H_
