#include "services/common/server.h"

#include <signal.h>

#include <chrono>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace spotdnn::services {

absl::StatusOr<StartedServer> StartServer(const std::string& listen,
                                          const std::vector<grpc::Service*>& services,
                                          const ServerSecurity& security) {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (!listen.empty()) {
    auto made = MakeServerCredentials(listen, security);
    if (!made.ok()) return made.status();
    credentials = *std::move(made);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  StartedServer started;
  if (!listen.empty()) {
    builder.AddListeningPort(listen, credentials, &started.port);
  }
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  for (grpc::Service* service : services) builder.RegisterService(service);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || (!listen.empty() && started.port == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on \"", listen, "\": address invalid or in use"));
  }
  return started;
}

void BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int signal = 0;
  while (sigwait(&set, &signal) != 0) {
  }
  return signal;
}

int ServeUntilSignal(const std::string& service_name, const std::string& listen,
                     const std::string& port_file, const std::vector<grpc::Service*>& services,
                     const ServerSecurity& security) {
  auto logger = spdlog::get(service_name);
  if (!logger) logger = spdlog::stderr_color_mt(service_name);
  auto started = StartServer(listen, services, security);
  if (!started.ok()) {
    logger->error("{}", std::string(started.status().message()));
    return absl::IsInvalidArgument(started.status()) ? 2 : 1;
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  logger->info("listening on {}:{} ({}{}{})", host, started->port,
               security.tls() ? "TLS" : "plaintext",
               security.tls_client_ca_file.empty() ? "" : ", client certificates required",
               security.auth_token_file.empty() ? "" : ", bearer token required");
  if (!port_file.empty()) {
    std::ofstream out(port_file, std::ios::trunc);
    out << started->port << "\n";
    if (!out) {
      logger->error("cannot write port file {}", port_file);
      started->server->Shutdown();
      return 1;
    }
  }
  const int signal = WaitForShutdownSignal();
  logger->info("signal {} received; shutting down", signal);
  started->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  started->server->Wait();
  logger->info("stopped");
  return 0;
}

}  // namespace spotdnn::services
