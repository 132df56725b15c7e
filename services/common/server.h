// Server plumbing shared by every spotdnn service main and the CLI's in-process mode. Channels
// and transport security are in security.h.
#ifndef SPOTDNN_SERVICES_COMMON_SERVER_H_
#define SPOTDNN_SERVICES_COMMON_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "services/common/security.h"

namespace spotdnn::services {

// A started server and the port it bound (0 for an in-process server).
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// The method label of calls to a method the server does not have (metrics: the label's values are
// the server's methods and this one).
inline constexpr absl::string_view kUnknownMethod = "unknown";

// Starts a server on `listen` ("host:port"; port 0 picks a free one) with health checking and
// server reflection, secured as `security` says (see MakeServerCredentials). An empty `listen`
// starts an in-process server (use server->InProcessChannel). Every call is counted, and timed,
// by method and status code in the default metrics registry (metrics.h); a method the server does
// not have is counted as kUnknownMethod. The health service answers
// SERVING for "" and for each spotdnn service's full name ("spotdnn.v1.Predictor"). A unary or
// server-streaming request that cannot be parsed answers INVALID_ARGUMENT naming the message
// type (gRPC alone answers INTERNAL with no message). INVALID_ARGUMENT for a bad `security`
// (nothing is bound then); UNAVAILABLE naming the address when it cannot be bound, as when
// another server listens there (the port is not shared: no SO_REUSEPORT).
absl::StatusOr<StartedServer> StartServer(const std::string& listen,
                                          const std::vector<grpc::Service*>& services,
                                          const ServerSecurity& security = {});

// The stop check long work in a handler polls (a plan search, an import, a large batch):
// DEADLINE_EXCEEDED once the call's deadline, or `max_duration` from now (the server's own cap on
// one call's work, whose flag `limit_name` names), has passed; CANCELLED once the call is
// cancelled (the client left, or the server is shutting down). `work` names the work in the
// message ("the search"). Cheap enough to call every few thousand steps.
std::function<absl::Status()> CallStopCheck(const grpc::ServerContext* context,
                                            absl::Duration max_duration, std::string work,
                                            std::string limit_name);

// The status message a request that cannot be parsed answers, for the full method name
// "/spotdnn.v1.Profiler/ImportLog": it names the request's message type.
std::string UnparsableRequestMessage(absl::string_view method);

// Asks for freed heap memory to go back to the system shortly (after a call with a large answer
// has finished and freed it; glibc keeps freed memory in per-thread arenas otherwise). Cheap,
// coalesced; the trim runs on a background thread about 200 ms and again 2 s later.
void ReleaseMemorySoon();

// How long calls in flight get to finish after SIGTERM; the README promises it.
inline constexpr absl::Duration kShutdownGrace = absl::Seconds(5);

// Calls this process's servers are answering now, but for the streams that only wait to be told
// something (health Watch, Detector.WatchEvents, Detector.AgentStream), which shutdown ends at
// once.
int CallsInFlight();

// Stops `server`: new calls are refused at once, calls in flight get up to `grace` to finish and
// are cancelled then. With nothing in flight it returns at once, whatever connections clients
// hold open (gRPC alone waits for them until the deadline).
void ShutdownWithin(grpc::Server& server, absl::Duration grace);

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts later; call it first
// in main so that WaitForShutdownSignal() receives them.
void BlockShutdownSignals();
// Waits until SIGINT or SIGTERM arrives and returns its number.
int WaitForShutdownSignal();

// The body of a service main: starts the server, logs the bound address (and writes the port to
// `port_file` when set), serves until SIGTERM/SIGINT, then shuts down (ShutdownWithin
// kShutdownGrace; a handler still running 1 s after the grace does not hold the exit). With a
// `metrics_listen` ("HOST:PORT", port 0 picks one) it first serves the default metrics registry
// there on GET /metrics and logs the address. With `serving`, the health service follows it
// (checked every 500 ms): NOT_SERVING for "" and every service while it says false. Returns the
// exit status for main: 2 when `security` or `metrics_listen` is wrong (before binding), 1 when
// serving fails.
int ServeUntilSignal(const std::string& service_name, const std::string& listen,
                     const std::string& port_file, const std::string& metrics_listen,
                     const std::vector<grpc::Service*>& services,
                     const ServerSecurity& security = {},
                     const std::function<bool()>& serving = nullptr);

// The body of a service main whose service is built from the data registry (built-ins plus the
// JSON files in `catalog_dir` and `workload_dir`): loads it, constructs `Service` from it (and
// `args`, e.g. its options) and serves until SIGTERM with `security` (and metrics on
// `metrics_listen`, as ServeUntilSignal). Returns 2 when a folder cannot be read or `security` or
// `metrics_listen` is wrong.
template <typename Service, typename... Args>
int ServeWithRegistry(const std::string& service_name, const std::string& listen,
                      const std::string& port_file, const std::string& metrics_listen,
                      const std::string& catalog_dir, const std::string& workload_dir,
                      const ServerSecurity& security, Args&&... args);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_SERVER_H_
