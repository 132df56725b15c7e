// spotdnn-profiler: sample and log ingestion, profile fitting and the profile store as a gRPC
// service.
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "profiler/profile_store.h"
#include "services/common/program.h"
#include "services/common/security_flags.h"
#include "services/common/server.h"
#include "services/profiler/profiler_service.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50053",
          "host:port to serve on; port 0 picks a free port (logged, and written to --port_file)");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once serving");
ABSL_FLAG(std::string, db, "spotdnn-profiles.db",
          "SQLite database of runs, samples and profiles (created if missing; WAL mode)");

int main(int argc, char** argv) {
  spotdnn::services::BlockShutdownSignals();
  spotdnn::services::ParseProgramCommandLine(argc, argv, "spotdnn-profiler",
                                             "The spotdnn parameter profiler (gRPC).");
  auto logger = spdlog::stderr_color_mt("spotdnn-profiler");
  const spotdnn::services::ServerSecurity security = spotdnn::services::ServerSecurityFromFlags();
  if (auto s = spotdnn::services::ValidateServerSecurity(absl::GetFlag(FLAGS_listen), security);
      !s.ok()) {
    logger->error("{}", std::string(s.message()));
    return 2;
  }
  const std::string db = absl::GetFlag(FLAGS_db);
  auto store = spotdnn::profiler::ProfileStore::Open(db);
  if (!store.ok()) {
    logger->error("--db: {}", std::string(store.status().message()));
    return 2;
  }
  logger->info("profile store {}", db);
  spotdnn::services::ProfilerServiceImpl service(
      std::shared_ptr<spotdnn::profiler::ProfileStore>(*std::move(store)));
  return spotdnn::services::ServeUntilSignal("spotdnn-profiler", absl::GetFlag(FLAGS_listen),
                                             absl::GetFlag(FLAGS_port_file), {&service}, security);
}
