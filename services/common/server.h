// Server plumbing shared by every spotdnn service main and the CLI's in-process mode. Channels
// and transport security are in security.h.
#ifndef SPOTDNN_SERVICES_COMMON_SERVER_H_
#define SPOTDNN_SERVICES_COMMON_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "services/common/security.h"

namespace spotdnn::services {

// A started server and the port it bound (0 for an in-process server).
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// Starts a server on `listen` ("host:port"; port 0 picks a free one) with health checking and
// server reflection, secured as `security` says (see MakeServerCredentials). An empty `listen`
// starts an in-process server (use server->InProcessChannel). INVALID_ARGUMENT for a bad
// `security` (nothing is bound then); UNAVAILABLE when the address cannot be bound.
absl::StatusOr<StartedServer> StartServer(const std::string& listen,
                                          const std::vector<grpc::Service*>& services,
                                          const ServerSecurity& security = {});

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts later; call it first
// in main so that WaitForShutdownSignal() receives them.
void BlockShutdownSignals();
// Waits until SIGINT or SIGTERM arrives and returns its number.
int WaitForShutdownSignal();

// The body of a service main: starts the server, logs the bound address (and writes the port to
// `port_file` when set), serves until SIGTERM/SIGINT, then shuts down gracefully. Returns the exit
// status for main: 2 when `security` is wrong (before binding), 1 when serving fails.
int ServeUntilSignal(const std::string& service_name, const std::string& listen,
                     const std::string& port_file, const std::vector<grpc::Service*>& services,
                     const ServerSecurity& security = {});

// The body of a service main whose service is built from the data registry (built-ins plus the
// JSON files in `catalog_dir` and `workload_dir`): loads it, constructs `Service` from it and
// serves until SIGTERM with `security`. Returns 2 when a folder cannot be read or `security` is
// wrong.
template <typename Service>
int ServeWithRegistry(const std::string& service_name, const std::string& listen,
                      const std::string& port_file, const std::string& catalog_dir,
                      const std::string& workload_dir, const ServerSecurity& security = {});

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_SERVER_H_
