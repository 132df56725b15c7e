// The service behind a CLI command: a remote one (--server HOST:PORT) or the same service run
// in-process on an in-process gRPC channel, so a command has one code path either way.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_CONNECTION_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_CONNECTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "services/common/data_registry.h"
#include "services/common/server.h"
#include "services/gateway/cli/args.h"

namespace spotdnn::gateway {

// A stub, and the in-process server that answers it when there is no --server.
template <typename Service, typename Impl>
struct Connection {
  std::unique_ptr<Impl> impl;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<typename Service::StubInterface> stub;
};

// Connects to --server when given, else starts `Impl` (constructed from the built-in data
// registry and Impl::Options::InProcess(): the caller is this process) in-process.
template <typename Service, typename Impl>
absl::StatusOr<Connection<Service, Impl>> Connect(const Args& args) {
  Connection<Service, Impl> c;
  if (auto target = args.Get("--server")) {
    if (target->find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--server = \"", *target, "\": expected HOST:PORT"));
    }
    c.stub = Service::NewStub(services::MakeChannel(*target));
    return c;
  }
  c.impl = std::make_unique<Impl>(
      std::make_shared<services::DataRegistry>(services::DataRegistry::WithBuiltins()),
      Impl::Options::InProcess());
  auto started = services::StartServer("", {c.impl.get()});
  if (!started.ok()) return started.status();
  c.server = std::move(started->server);
  c.stub = Service::NewStub(c.server->InProcessChannel(services::DefaultChannelArguments()));
  return c;
}

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_CONNECTION_H_
