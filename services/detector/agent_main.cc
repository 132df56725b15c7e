// spotdnn-agent: runs on every instance. Without a command it polls the instance's metadata
// service and streams notices and heartbeats to the detector. With one
// (`spotdnn-agent [FLAGS] -- COMMAND [ARGS...]`) it is the instance wrapper: it runs the command
// in its own process group, copies its output to stdout, forwards its SPOTDNN_SAMPLE lines to the
// profiler, hands it this instance's revocation notice (a file and a signal), keeps the
// checkpoint folder in sync with S3, and exits with the command's status.
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "services/common/program.h"
#include "services/common/security_flags.h"
#include "services/common/server.h"
#include "services/detector/agent.h"
#include "services/detector/instance_wrapper.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, detector, "",
          "detector replicas, HOST:PORT[,HOST:PORT...], tried in order (the next one when a "
          "stream breaks). Default: $SPOTDNN_DETECTOR; none: no detector stream (a command must "
          "be given then)");
ABSL_FLAG(std::string, instance_id, "", "this instance's id. Default: $SPOTDNN_INSTANCE_ID");
ABSL_FLAG(std::string, job_id, "",
          "the job this instance belongs to (and of samples that do not say). Default: "
          "$SPOTDNN_JOB_ID");
ABSL_FLAG(std::string, cloud, "",
          "aws, gce or azure: whose metadata service to read. Default: $SPOTDNN_CLOUD");
ABSL_FLAG(std::string, metadata_endpoint, "",
          "base URL of the metadata service. Default: $SPOTDNN_METADATA_ENDPOINT, else the "
          "cloud's own (http://169.254.169.254, http://metadata.google.internal)");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "heartbeat interval");
ABSL_FLAG(absl::Duration, poll_interval, absl::Seconds(1), "AWS and Azure poll interval");
ABSL_FLAG(absl::Duration, request_timeout, absl::Milliseconds(800), "metadata request timeout");
ABSL_FLAG(bool, azure_ack, false,
          "acknowledge Azure Preempt events (POST StartRequests) once reported");
// The instance wrapper (with a command after --).
ABSL_FLAG(std::string, profiler, "",
          "wrapper: HOST:PORT of the profiler the command's SPOTDNN_SAMPLE lines go to. Default: "
          "$SPOTDNN_PROFILER; none: samples are only counted and logged");
ABSL_FLAG(std::string, notice_signal, "TERM",
          "wrapper: the signal sent to the command's process group on this instance's "
          "revocation notice (TERM, INT, HUP, USR1, USR2, ... or a number; none: no signal)");
ABSL_FLAG(std::string, notice_file, "",
          "wrapper: the file written (atomically) with the notice before the signal; the "
          "command gets its path in SPOTDNN_NOTICE_FILE. Default: $SPOTDNN_NOTICE_FILE, else "
          "$TMPDIR (or /tmp)/spotdnn-notice-INSTANCE.json");
ABSL_FLAG(std::string, spool, "",
          "wrapper: the file holding samples the profiler has not acknowledged (kept across a "
          "profiler outage and an agent restart). Default: $TMPDIR (or "
          "/tmp)/spotdnn-samples-INSTANCE.spool; none: memory only");
ABSL_FLAG(std::string, instance_type, "",
          "wrapper: instance_type of samples that do not say. Default: $SPOTDNN_INSTANCE_TYPE");
ABSL_FLAG(int, workers, -1,
          "wrapper: cluster_workers of samples that do not say. Default: $SPOTDNN_WORKERS");
ABSL_FLAG(int, batch_size, -1,
          "wrapper: batch_size of samples that do not say. Default: $SPOTDNN_BATCH_SIZE");
ABSL_FLAG(absl::Duration, batch_interval, absl::Milliseconds(200),
          "wrapper: the longest a sample waits before it is sent");
ABSL_FLAG(int, max_batch, 512, "wrapper: samples per ReportSamples call");
ABSL_FLAG(absl::Duration, report_deadline, absl::Seconds(10),
          "wrapper: deadline of one ReportSamples call");
ABSL_FLAG(absl::Duration, flush_timeout, absl::Seconds(5),
          "wrapper: after the command exits, how long to keep sending what is left (the rest "
          "stays in the spool)");
ABSL_FLAG(absl::Duration, orphan_grace, absl::Seconds(10),
          "wrapper: if the agent is killed, the command's process group gets SIGTERM, and "
          "SIGKILL this long after");
ABSL_FLAG(std::string, checkpoint_uri, "",
          "wrapper: s3://BUCKET/PREFIX kept in sync with --checkpoint_dir: downloaded into it "
          "before the command starts, new and changed files uploaded while it runs and after "
          "it exits. Default: $SPOTDNN_CHECKPOINT_URI (none: no sync)");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "wrapper: the local checkpoint folder. Default: $SPOTDNN_CHECKPOINT_DIR");
ABSL_FLAG(absl::Duration, checkpoint_interval, absl::Seconds(10),
          "wrapper: how often the checkpoint folder is uploaded (every second after a notice)");
ABSL_FLAG(std::string, s3_region, "",
          "wrapper: the checkpoint bucket's region. Default: $AWS_REGION, else "
          "$AWS_DEFAULT_REGION, else us-east-1");
ABSL_FLAG(std::string, s3_endpoint, "",
          "wrapper: an S3-compatible endpoint, http(s)://HOST[:PORT], addressed path-style. "
          "Default: $SPOTDNN_S3_ENDPOINT, else AWS's");

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The flag's value, else the environment variable's; "none" is empty.
std::string FlagOrEnv(const std::string& flag, const char* variable) {
  std::string value = flag.empty() ? Env(variable) : flag;
  return value == "none" ? "" : value;
}

// An integer flag (-1: unset) or the environment variable's; errors name both.
bool IntFlagOrEnv(int flag, const char* flag_name, const char* variable, int* out,
                  std::string* error) {
  if (flag >= 0) {
    *out = flag;
    return true;
  }
  const std::string text = Env(variable);
  if (text.empty()) return true;
  if (!absl::SimpleAtoi(text, out) || *out < 0) {
    *error = absl::StrCat(variable, " = \"", text, "\": expected a whole number >= 0 (or give --",
                          flag_name, ")");
    return false;
  }
  return true;
}

std::string TempDir() {
  std::string dir = Env("TMPDIR");
  if (dir.empty()) dir = "/tmp";
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

int main(int argc, char** argv) {
  spotdnn::services::BlockShutdownSignals();
  signal(SIGPIPE, SIG_IGN);  // a closed instance log must not kill the agent
  // --help lists this program's flags and the client security flags; --version.
  constexpr const char* kUsage =
      "The spotdnn instance agent.\n"
      "  spotdnn-agent [FLAGS]                 notices and heartbeats to the detector\n"
      "  spotdnn-agent [FLAGS] -- COMMAND ...  the instance wrapper: runs COMMAND in its own\n"
      "      process group, copies its output to stdout, sends its SPOTDNN_SAMPLE lines to the\n"
      "      profiler, writes this instance's revocation notice to SPOTDNN_NOTICE_FILE and then\n"
      "      signals COMMAND (--notice_signal), syncs SPOTDNN_CHECKPOINT_DIR with\n"
      "      --checkpoint_uri, and exits with COMMAND's status (128 + signal when killed).\n"
      "Flags default from the variables the launcher gives every instance (SPOTDNN_*), so a\n"
      "provider starts it with: spotdnn-agent --cloud=aws -- /bin/sh -c 'python train.py'";
  // Everything after the first "--" is the command; the flags are what comes before it.
  int flag_argc = argc;
  std::vector<std::string> command;
  bool wrapper = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      flag_argc = i;
      wrapper = true;
      for (int j = i + 1; j < argc; ++j) command.emplace_back(argv[j]);
      break;
    }
  }
  // Only flags before "--": a stray argument there is exit status 2 ("... takes only flags").
  spotdnn::services::ParseProgramCommandLine(flag_argc, argv, "spotdnn-agent", kUsage);
  auto logger = spdlog::stderr_color_mt("spotdnn-agent");
  if (auto s =
          spotdnn::services::SetDefaultClientSecurity(spotdnn::services::ClientSecurityFromFlags());
      !s.ok()) {
    logger->error("{}", std::string(s.message()));
    return 2;
  }
  const std::string cloud_text = FlagOrEnv(absl::GetFlag(FLAGS_cloud), "SPOTDNN_CLOUD");
  auto cloud = spotdnn::detector::ParseCloud("--cloud", cloud_text);
  if (!cloud.ok()) {
    logger->error("{} (or set SPOTDNN_CLOUD)", std::string(cloud.status().message()));
    return 2;
  }
  spotdnn::services::AgentOptions options;
  const std::string detectors = FlagOrEnv(absl::GetFlag(FLAGS_detector), "SPOTDNN_DETECTOR");
  options.detectors = absl::StrSplit(detectors, ',', absl::SkipEmpty());
  options.instance_id = FlagOrEnv(absl::GetFlag(FLAGS_instance_id), "SPOTDNN_INSTANCE_ID");
  options.job_id = FlagOrEnv(absl::GetFlag(FLAGS_job_id), "SPOTDNN_JOB_ID");
  options.cloud = *cloud;
  options.metadata_endpoint =
      FlagOrEnv(absl::GetFlag(FLAGS_metadata_endpoint), "SPOTDNN_METADATA_ENDPOINT");
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.poller.interval = absl::GetFlag(FLAGS_poll_interval);
  options.poller.request_timeout = absl::GetFlag(FLAGS_request_timeout);
  options.poller.azure_ack = absl::GetFlag(FLAGS_azure_ack);
  if (options.instance_id.empty()) {
    logger->error("instance_id = \"\": give --instance_id or set SPOTDNN_INSTANCE_ID");
    return 2;
  }

  if (!wrapper) {
    if (options.detectors.empty()) {
      logger->error(
          "detector = \"\": name at least one HOST:PORT (--detector or SPOTDNN_DETECTOR), or "
          "give a command after -- to run the instance wrapper");
      return 2;
    }
    spotdnn::services::Agent agent(options);
    if (auto s = agent.Start(); !s.ok()) {
      logger->error("{}", std::string(s.message()));
      return 2;
    }
    logger->info("watching {} ({}) for {}", options.instance_id,
                 std::string(spotdnn::detector::CloudName(options.cloud)), detectors);
    const int signal = spotdnn::services::WaitForShutdownSignal();
    logger->info("signal {} received; stopping", signal);
    agent.Stop();
    return 0;
  }

  if (command.empty()) {
    logger->error("no command after --: spotdnn-agent [FLAGS] -- COMMAND [ARGS...]");
    return 2;
  }
  spotdnn::services::InstanceWrapperOptions w;
  w.agent = options;
  w.command = command;
  w.profiler = FlagOrEnv(absl::GetFlag(FLAGS_profiler), "SPOTDNN_PROFILER");
  auto notice_signal =
      spotdnn::services::ParseSignal("--notice_signal", absl::GetFlag(FLAGS_notice_signal));
  if (!notice_signal.ok()) {
    logger->error("{}", std::string(notice_signal.status().message()));
    return 2;
  }
  w.notice_signal = *notice_signal;
  w.notice_file = FlagOrEnv(absl::GetFlag(FLAGS_notice_file), "SPOTDNN_NOTICE_FILE");
  if (w.notice_file.empty()) {
    w.notice_file = absl::StrCat(TempDir(), "/spotdnn-notice-", options.instance_id, ".json");
  }
  const std::string spool = absl::GetFlag(FLAGS_spool);
  if (spool.empty()) {
    w.forwarder.spool_path =
        absl::StrCat(TempDir(), "/spotdnn-samples-", options.instance_id, ".spool");
  } else if (spool != "none") {
    w.forwarder.spool_path = spool;
  }
  w.forwarder.batch_interval = absl::GetFlag(FLAGS_batch_interval);
  w.forwarder.max_batch = absl::GetFlag(FLAGS_max_batch);
  w.report_deadline = absl::GetFlag(FLAGS_report_deadline);
  w.flush_timeout = absl::GetFlag(FLAGS_flush_timeout);
  w.orphan_grace = absl::GetFlag(FLAGS_orphan_grace);
  w.sample_defaults.job_id = options.job_id;
  w.sample_defaults.worker_id = options.instance_id;
  w.sample_defaults.instance_type =
      FlagOrEnv(absl::GetFlag(FLAGS_instance_type), "SPOTDNN_INSTANCE_TYPE");
  std::string error;
  if (!IntFlagOrEnv(absl::GetFlag(FLAGS_workers), "workers", "SPOTDNN_WORKERS",
                    &w.sample_defaults.cluster_workers, &error) ||
      !IntFlagOrEnv(absl::GetFlag(FLAGS_batch_size), "batch_size", "SPOTDNN_BATCH_SIZE",
                    &w.sample_defaults.batch_size, &error)) {
    logger->error("{}", error);
    return 2;
  }
  w.checkpoint_uri = FlagOrEnv(absl::GetFlag(FLAGS_checkpoint_uri), "SPOTDNN_CHECKPOINT_URI");
  w.checkpoint_dir = FlagOrEnv(absl::GetFlag(FLAGS_checkpoint_dir), "SPOTDNN_CHECKPOINT_DIR");
  w.checkpoint_interval = absl::GetFlag(FLAGS_checkpoint_interval);
  w.s3_region = absl::GetFlag(FLAGS_s3_region);
  if (w.s3_region.empty()) w.s3_region = Env("AWS_REGION");
  if (w.s3_region.empty()) w.s3_region = Env("AWS_DEFAULT_REGION");
  w.s3_endpoint = FlagOrEnv(absl::GetFlag(FLAGS_s3_endpoint), "SPOTDNN_S3_ENDPOINT");
  logger->info("wrapping {} on {} ({}): profiler {}, detector {}, notice file {}, signal {}",
               command[0], options.instance_id,
               std::string(spotdnn::detector::CloudName(options.cloud)),
               w.profiler.empty() ? "none (samples counted only)" : w.profiler,
               detectors.empty() ? "none" : detectors, w.notice_file,
               w.notice_signal == 0 ? "none" : absl::StrCat(w.notice_signal));
  return spotdnn::services::RunInstanceWrapper(std::move(w));
}
