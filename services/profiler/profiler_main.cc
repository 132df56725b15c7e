// spotdnn-profiler: sample and log ingestion, profile fitting and the profile store as a gRPC
// service.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "base/db/database.h"
#include "profiler/profile_store.h"
#include "services/common/metrics_flags.h"
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
          "SQLite database of runs, samples and profiles (created if missing; WAL mode), unless "
          "--store names the store");
ABSL_FLAG(std::string, store, "",
          "the store of runs, samples and profiles: sqlite:PATH or postgres://USER@HOST/DB (a "
          "libpq URI; the password from PGPASSFILE, ~/.pgpass or PGPASSWORD, never in the URI); "
          "default: --db");
ABSL_FLAG(std::vector<std::string>, import_root, {},
          "comma-separated absolute folders under which ImportLog may read a path the client "
          "names (regular files only, no symbolic links below the folder, no \"..\"); none by "
          "default: clients send the log's content");
ABSL_FLAG(uint64_t, max_import_bytes, uint64_t{64} << 20,
          "most bytes one ImportLog may read: its content, or the files under its path");

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
  spotdnn::services::ProfilerOptions options;
  auto roots = spotdnn::profiler::ImportRoots::Create(absl::GetFlag(FLAGS_import_root));
  if (!roots.ok()) {
    logger->error("{}", std::string(roots.status().message()));
    return 2;
  }
  options.import_roots = *std::move(roots);
  options.max_import_bytes = absl::GetFlag(FLAGS_max_import_bytes);
  if (options.max_import_bytes == 0) {
    logger->error("--max_import_bytes = 0: must be positive");
    return 2;
  }
  auto db =
      spotdnn::db::ChosenStoreSpec(absl::GetFlag(FLAGS_store), "--store", absl::GetFlag(FLAGS_db));
  if (!db.ok()) {
    logger->error("{}", std::string(db.status().message()));
    return 2;
  }
  if (auto s = spotdnn::services::CheckStoreFolder(
          absl::GetFlag(FLAGS_store).empty() ? "--db" : "--store", *db);
      !s.ok()) {
    logger->error("{}", std::string(s.message()));
    return 2;
  }
  auto store = spotdnn::profiler::ProfileStore::Open(*db);
  if (!store.ok()) {
    logger->error("{}: {}", absl::GetFlag(FLAGS_store).empty() ? "--db" : "--store",
                  std::string(store.status().message()));
    return 2;
  }
  logger->info("profile store {}", *db);
  if (options.import_roots.empty()) {
    logger->info("imports by path: none (no --import_root); clients send content");
  } else {
    for (const std::string& root : options.import_roots.roots()) {
      logger->info("imports by path under {}", root);
    }
  }
  spotdnn::services::ProfilerServiceImpl service(
      std::shared_ptr<spotdnn::profiler::ProfileStore>(*std::move(store)), std::move(options));
  return spotdnn::services::ServeUntilSignal(
      "spotdnn-profiler", absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_port_file),
      absl::GetFlag(FLAGS_metrics_listen), {&service}, security);
}
