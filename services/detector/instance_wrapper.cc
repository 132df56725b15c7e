// spotdnn-agent's instance wrapper put together (RunInstanceWrapper): the checkpoint restored,
// the notice poller, the detector agent, the sample forwarder, the wrapped command and its
// signals, the checkpoint uploads, and the end. Its parts: command_supervisor.cc,
// notice_delivery.cc, checkpoint_uploader.cc.
#include "services/detector/instance_wrapper.h"

#include <signal.h>
#include <time.h>

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/text.h"
#include "profiler/importers.h"
#include "profiler/sample.h"
#include "provisioner/launcher/aws_provider.h"
#include "provisioner/launcher/checkpoint_sync.h"
#include "provisioner/launcher/s3_client.h"
#include "services/detector/agent_log.h"
#include "services/detector/checkpoint_uploader.h"
#include "services/detector/notice_delivery.h"
#include "services/profiler/sample_convert.h"

namespace spotdnn::services {

std::optional<v1::Sample> SampleLineReader::Read(absl::string_view line) {
  ++lines_;
  absl::StatusOr<std::optional<profiler::Sample>> parsed = profiler::ParseSampleLine(line);
  auto malformed = [&](absl::string_view reason) -> std::optional<v1::Sample> {
    ++malformed_;
    if (static_cast<int>(reasons_.size()) < max_reasons_) {
      reasons_.push_back(absl::StrCat("line ", lines_, ": ", reason));
    }
    return std::nullopt;
  };
  if (parsed.ok() && !parsed->has_value()) return std::nullopt;
  ++sample_lines_;
  if (!parsed.ok()) return malformed(parsed.status().message());
  profiler::Sample s = **parsed;
  if (s.job_id.empty()) s.job_id = defaults_.job_id;
  if (s.worker_id.empty()) s.worker_id = defaults_.worker_id;
  if (s.instance_type.empty()) s.instance_type = defaults_.instance_type;
  // A synchronous sample's ranks come from its placement, not from the agent's worker count.
  if (s.cluster_workers == 0 && s.placement.empty()) s.cluster_workers = defaults_.cluster_workers;
  if (s.batch_size == 0) s.batch_size = defaults_.batch_size;
  if (s.job_id.empty()) {
    return malformed("job_id is empty: give job_id= in the line, or SPOTDNN_JOB_ID (--job_id)");
  }
  if (absl::Status v = profiler::ValidateSample(s); !v.ok()) return malformed(v.message());
  return ToProto(s);
}

int RunInstanceWrapper(InstanceWrapperOptions options) {
  auto logger = AgentLogger();
  if (options.command.empty()) {
    logger->error("no command after --");
    return 2;
  }
  if (options.notice_file.empty()) {
    logger->error("notice_file = \"\": name the file the command reads a notice from");
    return 2;
  }

  // The checkpoint folder, restored before the command starts.
  std::unique_ptr<launcher::ObjectStore> store;
  std::unique_ptr<launcher::CheckpointSync> sync;
  if (!options.checkpoint_uri.empty()) {
    absl::StatusOr<launcher::S3Location> where =
        launcher::ParseS3Uri("checkpoint_uri", options.checkpoint_uri);
    if (!where.ok()) {
      logger->error("{}", std::string(where.status().message()));
      return 2;
    }
    if (options.checkpoint_dir.empty()) {
      logger->error(
          "checkpoint_dir = \"\": --checkpoint_uri needs the local folder to keep in sync "
          "(--checkpoint_dir or SPOTDNN_CHECKPOINT_DIR)");
      return 2;
    }
    absl::StatusOr<launcher::AwsCredentials> credentials = launcher::ResolveAwsCredentials();
    if (!credentials.ok()) {
      logger->error("checkpoint_uri = \"{}\": {}", options.checkpoint_uri,
                    std::string(credentials.status().message()));
      return 1;
    }
    launcher::S3Client::Options s3_options;
    s3_options.region = options.s3_region;
    s3_options.endpoint_url = options.s3_endpoint;
    s3_options.credentials = *credentials;
    // Instance-role credentials expire after hours: S3's refusal has them resolved again.
    absl::StatusOr<std::unique_ptr<launcher::ObjectStore>> bucket =
        launcher::MakeRefreshingS3ObjectStore(s3_options, where->bucket,
                                              [] { return launcher::ResolveAwsCredentials(); });
    if (!bucket.ok()) {
      logger->error("{}", std::string(bucket.status().message()));
      return 2;
    }
    store = std::move(*bucket);
    sync = std::make_unique<launcher::CheckpointSync>(store.get(), where->prefix,
                                                      options.checkpoint_dir);
    absl::StatusOr<launcher::SyncCounts> restored = sync->Restore();
    if (!restored.ok()) {
      logger->error("checkpoint restore from {} into {}: {}", options.checkpoint_uri,
                    options.checkpoint_dir, std::string(restored.status().message()));
      return 1;
    }
    logger->info(
        "checkpoint restore from {} into {}: {} files, {} bytes{}", options.checkpoint_uri,
        options.checkpoint_dir, restored->files, restored->bytes,
        restored->skipped > 0 ? absl::StrCat(" (", restored->skipped, " keys skipped)") : "");
  }

  // A notice file left from an earlier run would read as a notice now.
  if (::unlink(options.notice_file.c_str()) == 0) {
    logger->info("removed a stale notice file {}", options.notice_file);
  }

  std::unique_ptr<SampleSink> sink;
  if (!options.profiler.empty()) sink = MakeProfilerSink(options.profiler, options.report_deadline);
  absl::StatusOr<std::unique_ptr<SampleForwarder>> forwarder =
      SampleForwarder::Start(options.forwarder, std::move(sink));
  if (!forwarder.ok()) {
    logger->error("{}", std::string(forwarder.status().message()));
    return 2;
  }

  const std::string cloud(detector::CloudName(options.agent.cloud));
  NoticeDelivery notices(options.notice_file, options.notice_signal, cloud,
                         options.agent.instance_id);
  options.agent.on_notice = [&notices](const detector::Notice& n) { notices.OnNotice(n); };
  Agent agent(options.agent);
  if (absl::Status s = agent.Start(); !s.ok()) {
    logger->error("{}", std::string(s.message()));
    (*forwarder)->Close(absl::ZeroDuration());
    return 2;
  }

  SampleLineReader reader(options.sample_defaults);
  SampleForwarder* f = forwarder->get();
  // The command's last lines, for the report of how it ended (TellingLastLines picks from them).
  std::deque<std::string> tail;
  std::mutex tail_mu;
  auto on_line = [&reader, f, &logger, &tail, &tail_mu](absl::string_view line) {
    {
      std::lock_guard<std::mutex> lock(tail_mu);
      tail.emplace_back(line.substr(0, 512));
      if (tail.size() > 200) tail.pop_front();
    }
    const size_t reasons = reader.reasons().size();
    std::optional<v1::Sample> sample = reader.Read(line);
    if (reader.reasons().size() > reasons) {
      logger->warn("malformed sample line (not sent): {}", reader.reasons().back());
    }
    if (sample) f->Add(*std::move(sample));
  };
  WrappedCommandOptions command_options;
  command_options.argv = options.command;
  command_options.env.emplace_back("SPOTDNN_NOTICE_FILE", options.notice_file);
  if (!options.checkpoint_dir.empty()) {
    command_options.env.emplace_back("SPOTDNN_CHECKPOINT_DIR", options.checkpoint_dir);
  }
  command_options.orphan_grace = options.orphan_grace;
  absl::StatusOr<std::unique_ptr<WrappedCommand>> command =
      WrappedCommand::Start(command_options, on_line);
  if (!command.ok()) {
    logger->error("{}", std::string(command.status().message()));
    agent.Stop();
    (*forwarder)->Close(absl::ZeroDuration());
    return absl::IsNotFound(command.status()) ? 127 : 1;
  }
  logger->info("started the command (process group {}): {}", (*command)->process_group(),
               absl::StrJoin(options.command, " "));
  notices.SetCommand(command->get());
  std::unique_ptr<CheckpointUploader> uploader;
  if (sync) {
    uploader = std::make_unique<CheckpointUploader>(sync.get(), options.checkpoint_interval,
                                                    [&notices] { return notices.noticed(); });
  }

  // Until the command exits: SIGTERM and SIGINT go on to its process group.
  sigset_t shutdown;
  sigemptyset(&shutdown);
  sigaddset(&shutdown, SIGINT);
  sigaddset(&shutdown, SIGTERM);
  std::optional<ChildExit> exit;
  bool told_to_stop = false;
  while (!(exit = (*command)->Wait(absl::Milliseconds(100)))) {
    timespec zero{0, 0};
    const int sig = sigtimedwait(&shutdown, nullptr, &zero);
    if (sig > 0) {
      told_to_stop = true;
      logger->info("signal {} received; passing it to the command", sig);
      if (absl::Status s = (*command)->Signal(sig); !s.ok()) {
        logger->warn("{}", std::string(s.message()));
      }
    }
  }
  logger->info("the command ended: {}", exit->Describe());
  if (!(*command)->FinishOutput(absl::Seconds(2))) {
    logger->warn("processes the command started still hold its output; stopped reading it");
  }
  notices.SetCommand(nullptr);
  // A notice read just now (the command ended at its signal) still reaches the detector.
  if (!agent.Flush(options.flush_timeout)) {
    logger->warn("a revocation notice was not acknowledged by a detector within {} s",
                 absl::ToDoubleSeconds(options.flush_timeout));
  }
  const auto flush_start = std::chrono::steady_clock::now();
  (*forwarder)->Close(options.flush_timeout);
  const double flush_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - flush_start).count();
  const SampleForwarderStats st = (*forwarder)->stats();
  logger->info(
      "samples: {} lines read, {} sample lines, {} malformed, {} queued, {} duplicates, {} "
      "acknowledged by the profiler ({} rejected by it), {} left in the spool; flush took {:.2f} s",
      reader.lines(), reader.sample_lines(), reader.malformed(), st.queued, st.duplicates,
      st.acknowledged, st.rejected, st.pending, flush_s);
  if (uploader) uploader->Finish();
  if (!told_to_stop && !notices.noticed()) {
    // It ended by itself (not at a revocation notice, not stopped with its instance): the
    // detector stops waiting for its heartbeats and the job learns how it ended. Told last, when
    // its samples and checkpoint are out: the job may stop the instance as soon as it knows.
    std::string output;
    {
      std::lock_guard<std::mutex> lock(tail_mu);
      for (const std::string& line : tail) absl::StrAppend(&output, line, "\n");
    }
    agent.ReportExit({.status = exit->ShellStatus(),
                      .how = exit->Describe(),
                      .last_lines = base::TellingLastLines(output, 20)});
    if (!agent.Flush(options.flush_timeout)) {
      logger->warn("the command's end was not acknowledged by a detector within {} s",
                   absl::ToDoubleSeconds(options.flush_timeout));
    }
  }
  agent.Stop();
  return exit->ShellStatus();
}

}  // namespace spotdnn::services
