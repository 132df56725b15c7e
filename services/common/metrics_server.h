// Serves a metrics registry (metrics.h) over HTTP: GET /metrics answers the Prometheus text
// format. What a service main's --metrics_listen starts.
#ifndef SPOTDNN_SERVICES_COMMON_METRICS_SERVER_H_
#define SPOTDNN_SERVICES_COMMON_METRICS_SERVER_H_

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/metrics.h"

namespace spotdnn::services {

// A host and port parsed from "HOST:PORT" ("[::1]:9090" for IPv6).
struct HostPort {
  std::string host;
  int port = 0;
};

// Parses "HOST:PORT" (port 0..65535; 0 picks a free one). INVALID_ARGUMENT naming `field` and
// the value otherwise.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view field, absl::string_view value);

// Bounds on the metrics server's clients (a scrape is one short request).
struct MetricsServerOptions {
  // Open at once; beyond them a newcomer takes the place of the oldest connection still sending
  // its request.
  int max_connections = 64;
  // From accepting a connection to having written its answer: a client that sends its request
  // (or reads the answer) slowly is closed then.
  std::chrono::milliseconds connection_deadline{5000};
  size_t max_request_bytes = 8192;  // a longer request is answered 431 and closed
};

// An HTTP/1.1 server answering GET (and HEAD) /metrics with `registry` rendered: 404 for other
// paths, 405 for other methods, and "Connection: close" on every answer. One thread serves every
// connection without blocking on any (poll), so slow or idle clients neither hold the others nor
// the server's destruction, which returns at once.
class MetricsServer {
 public:
  // Binds `listen` (checked by ParseHostPort, named `field` in errors) and serves on a thread.
  // INVALID_ARGUMENT for a bad value; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(absl::string_view field,
                                                              absl::string_view listen,
                                                              const metrics::Registry& registry,
                                                              MetricsServerOptions options = {});
  // Stops serving and closes every connection, without waiting for any client.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port bound (the one picked for port 0).
  int port() const { return port_; }
  // The host it serves on, as given.
  const std::string& host() const { return host_; }

  // The whole HTTP answer to `request` (its request line and headers).
  static std::string Respond(absl::string_view request, const metrics::Registry& registry);

 private:
  MetricsServer() = default;
  void Serve(const metrics::Registry& registry);

  MetricsServerOptions options_;
  std::thread thread_;
  std::string host_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_read_ = -1;  // readable once the destructor wants the thread to stop
  int wake_write_ = -1;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_METRICS_SERVER_H_
