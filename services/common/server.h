// Server plumbing shared by every spotdnn service main and the CLI's in-process mode.
#ifndef SPOTDNN_SERVICES_COMMON_SERVER_H_
#define SPOTDNN_SERVICES_COMMON_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace spotdnn::services {

// Largest message a spotdnn server or client accepts (a PredictBatch of many clusters is big).
inline constexpr int kMaxMessageBytes = 256 << 20;

// Channel arguments every spotdnn client uses (message size limits).
grpc::ChannelArguments DefaultChannelArguments();
// An insecure channel to `target` ("host:port") with DefaultChannelArguments().
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);

// A started server and the port it bound (0 for an in-process server).
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// Starts a server on `listen` ("host:port"; port 0 picks a free one) with health checking and
// server reflection. An empty `listen` starts an in-process server (use server->InProcessChannel).
// UNAVAILABLE when the address cannot be bound.
absl::StatusOr<StartedServer> StartServer(const std::string& listen,
                                          const std::vector<grpc::Service*>& services);

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts later; call it first
// in main so that WaitForShutdownSignal() receives them.
void BlockShutdownSignals();
// Waits until SIGINT or SIGTERM arrives and returns its number.
int WaitForShutdownSignal();

// The body of a service main: starts the server, logs the bound address (and writes the port to
// `port_file` when set), serves until SIGTERM/SIGINT, then shuts down gracefully. Returns the exit
// status for main.
int ServeUntilSignal(const std::string& service_name, const std::string& listen,
                     const std::string& port_file, const std::vector<grpc::Service*>& services);

// The body of a service main whose service is built from the data registry (built-ins plus the
// JSON files in `catalog_dir` and `workload_dir`): loads it, constructs `Service` from it and
// serves until SIGTERM. Returns 2 when a folder cannot be read.
template <typename Service>
int ServeWithRegistry(const std::string& service_name, const std::string& listen,
                      const std::string& port_file, const std::string& catalog_dir,
                      const std::string& workload_dir);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_SERVER_H_
