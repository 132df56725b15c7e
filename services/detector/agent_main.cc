// spotdnn-agent: runs on every instance, polls the local metadata service and streams notices and
// heartbeats to the detector.
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "services/common/security_flags.h"
#include "services/common/server.h"
#include "services/detector/agent.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(
    std::string, detector, "127.0.0.1:50054",
    "detector replicas, HOST:PORT[,HOST:PORT...]; the next one is tried when a stream breaks");
ABSL_FLAG(std::string, instance_id, "", "this instance's id (required)");
ABSL_FLAG(std::string, job_id, "", "the job this instance belongs to");
ABSL_FLAG(std::string, cloud, "", "aws, gce or azure (required)");
ABSL_FLAG(std::string, metadata_endpoint, "",
          "base URL of the metadata service (default: the cloud's own, e.g. "
          "http://169.254.169.254)");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "heartbeat interval");
ABSL_FLAG(absl::Duration, poll_interval, absl::Seconds(1), "AWS and Azure poll interval");
ABSL_FLAG(absl::Duration, request_timeout, absl::Milliseconds(800), "metadata request timeout");
ABSL_FLAG(bool, azure_ack, false,
          "acknowledge Azure Preempt events (POST StartRequests) once reported");

int main(int argc, char** argv) {
  spotdnn::services::BlockShutdownSignals();
  absl::SetProgramUsageMessage(
      "The spotdnn instance agent: local revocation notices to the detector.");
  absl::ParseCommandLine(argc, argv);
  auto logger = spdlog::stderr_color_mt("spotdnn-agent");
  if (auto s =
          spotdnn::services::SetDefaultClientSecurity(spotdnn::services::ClientSecurityFromFlags());
      !s.ok()) {
    logger->error("{}", std::string(s.message()));
    return 2;
  }
  auto cloud = spotdnn::detector::ParseCloud("--cloud", absl::GetFlag(FLAGS_cloud));
  if (!cloud.ok()) {
    logger->error("{}", std::string(cloud.status().message()));
    return 2;
  }
  spotdnn::services::AgentOptions options;
  options.detectors = absl::StrSplit(absl::GetFlag(FLAGS_detector), ',', absl::SkipEmpty());
  options.instance_id = absl::GetFlag(FLAGS_instance_id);
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.cloud = *cloud;
  options.metadata_endpoint = absl::GetFlag(FLAGS_metadata_endpoint);
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.poller.interval = absl::GetFlag(FLAGS_poll_interval);
  options.poller.request_timeout = absl::GetFlag(FLAGS_request_timeout);
  options.poller.azure_ack = absl::GetFlag(FLAGS_azure_ack);
  spotdnn::services::Agent agent(options);
  if (auto s = agent.Start(); !s.ok()) {
    logger->error("{}", std::string(s.message()));
    return 2;
  }
  logger->info("watching {} ({}) for {}", options.instance_id,
               std::string(spotdnn::detector::CloudName(options.cloud)),
               absl::GetFlag(FLAGS_detector));
  const int signal = spotdnn::services::WaitForShutdownSignal();
  logger->info("signal {} received; stopping", signal);
  agent.Stop();
  return 0;
}
