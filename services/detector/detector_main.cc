// spotdnn-detector: the revocation detector as a gRPC service.
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "base/db/database.h"
#include "base/metrics.h"
#include "detector/detector.h"
#include "services/common/metrics_flags.h"
#include "services/common/program.h"
#include "services/common/security_flags.h"
#include "services/common/server.h"
#include "services/detector/detector_metrics.h"
#include "services/detector/detector_service.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50054",
          "host:port to serve on; port 0 picks a free port (logged, and written to --port_file)");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once serving");
ABSL_FLAG(std::string, db, "spotdnn-detector.db",
          "SQLite file of registrations and events (\":memory:\" keeps nothing), unless --store "
          "names the store");
ABSL_FLAG(std::string, store, "",
          "the store of registrations and events: sqlite:PATH (one replica) or "
          "postgres://USER@HOST/DB (a libpq URI; the password from PGPASSFILE, ~/.pgpass or "
          "PGPASSWORD, never in the URI): any number of replicas share it; default: --db");
ABSL_FLAG(absl::Duration, poll_interval, absl::Seconds(1),
          "interval of the AWS and Azure metadata polls this replica makes");
ABSL_FLAG(absl::Duration, request_timeout, absl::Milliseconds(800),
          "timeout of one metadata request");
ABSL_FLAG(int, gce_long_poll_timeout_s, 30, "timeout_sec of one GCE wait_for_change long poll");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "agents' heartbeat interval");
ABSL_FLAG(int, lost_after_intervals, 3,
          "an agent-fed instance missing this many heartbeat intervals is lost");
ABSL_FLAG(absl::Duration, boot_grace, absl::Minutes(10),
          "an agent-fed instance with no heartbeat this long after its registration (its VM "
          "booting) is lost");
ABSL_FLAG(bool, azure_ack, false,
          "acknowledge Azure Preempt events (POST StartRequests) once reported");
ABSL_FLAG(std::string, replica_id, "replica-0",
          "this replica's id, unique among the replicas sharing a PostgreSQL store (on Kubernetes: "
          "the pod's name); its lease and its place on the consistent-hash ring");
ABSL_FLAG(absl::Duration, lease, absl::Seconds(3),
          "with a PostgreSQL store: how long a replica's lease lasts (renewed every third of it); "
          "a dead replica's instances move to the others within about this long");
ABSL_FLAG(int, event_retention, 100000, "newest events kept for WatchEvents resumes");

int main(int argc, char** argv) {
  spotdnn::services::BlockShutdownSignals();
  spotdnn::services::ParseProgramCommandLine(
      argc, argv, "spotdnn-detector",
      "The spotdnn revocation detector (gRPC): AWS, Google Cloud and Azure notices, heartbeats.");
  auto logger = spdlog::stderr_color_mt("spotdnn-detector");

  const spotdnn::services::ServerSecurity security = spotdnn::services::ServerSecurityFromFlags();
  if (auto s = spotdnn::services::ValidateServerSecurity(absl::GetFlag(FLAGS_listen), security);
      !s.ok()) {
    logger->error("{}", std::string(s.message()));
    return 2;
  }
  spotdnn::detector::DetectorOptions options;
  auto store =
      spotdnn::db::ChosenStoreSpec(absl::GetFlag(FLAGS_store), "--store", absl::GetFlag(FLAGS_db));
  if (!store.ok()) {
    logger->error("{}", std::string(store.status().message()));
    return 2;
  }
  if (auto s = spotdnn::services::CheckStoreFolder(
          absl::GetFlag(FLAGS_store).empty() ? "--db" : "--store", *store);
      !s.ok()) {
    logger->error("{}", std::string(s.message()));
    return 2;
  }
  options.db_path = *store;
  options.poller.interval = absl::GetFlag(FLAGS_poll_interval);
  options.poller.request_timeout = absl::GetFlag(FLAGS_request_timeout);
  options.poller.gce_long_poll_timeout_s = absl::GetFlag(FLAGS_gce_long_poll_timeout_s);
  options.poller.azure_ack = absl::GetFlag(FLAGS_azure_ack);
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.lost_after_intervals = absl::GetFlag(FLAGS_lost_after_intervals);
  options.boot_grace = absl::GetFlag(FLAGS_boot_grace);
  options.replica_id = absl::GetFlag(FLAGS_replica_id);
  options.lease = absl::GetFlag(FLAGS_lease);
  options.event_retention = static_cast<size_t>(std::max(1, absl::GetFlag(FLAGS_event_retention)));
  spotdnn::services::DetectorMetrics metrics;  // outlives the detector (shut down below)
  options.observer = &metrics;
  auto detector = spotdnn::detector::Detector::Open(options);
  if (!detector.ok()) {
    logger->error("{}", std::string(detector.status().message()));
    return 2;
  }
  std::shared_ptr<spotdnn::detector::Detector> shared = *std::move(detector);
  logger->info(
      "replica {}: {} instances, last event {}{}", options.replica_id, shared->List("").size(),
      shared->last_sequence(),
      shared->shared() ? ", sharing a PostgreSQL store with the replicas holding leases" : "");
  // Read when scraped; nothing once the detector is gone.
  std::weak_ptr<spotdnn::detector::Detector> weak = shared;
  spotdnn::metrics::DefaultRegistry().GaugeFunction(
      "spotdnn_detector_instances_watched", "instances registered with this replica", [weak] {
        auto d = weak.lock();
        return d ? static_cast<double>(d->watched()) : 0.0;
      });
  spotdnn::metrics::DefaultRegistry().GaugeFunction(
      "spotdnn_detector_instances_polled",
      "instances whose metadata service this replica polls (those it owns)", [weak] {
        auto d = weak.lock();
        return d ? static_cast<double>(d->polled()) : 0.0;
      });
  spotdnn::services::DetectorServiceImpl service(shared);
  // NOT_SERVING while a shared replica holds no lease or cannot reach its database.
  const int code = spotdnn::services::ServeUntilSignal(
      "spotdnn-detector", absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_port_file),
      absl::GetFlag(FLAGS_metrics_listen), {&service}, security, [weak] {
        auto d = weak.lock();
        return d && d->serving();
      });
  service.Stop();
  shared->Shutdown();
  return code;
}
