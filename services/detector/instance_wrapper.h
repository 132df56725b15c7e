// The pieces of spotdnn-agent's instance wrapper (`spotdnn-agent [FLAGS] -- COMMAND ...`):
//   - WrappedCommand: the user's command as a child in its own process group, its stdout and
//     stderr copied line by line to the instance log, and a guard that stops the group if the
//     agent itself dies;
//   - SampleLineReader: SPOTDNN_SAMPLE lines of that output as spotdnn.v1.Samples (the
//     profiler's own parser), with what the line leaves out filled from the environment, and the
//     malformed ones counted;
//   - the notice file handed to the training process (NoticeFileJson, WriteFileAtomically) and
//     the signal it gets (ParseSignal).
// The whole wrapper (these, the notice poller, the sample forwarder and the checkpoint sync) is
// RunInstanceWrapper.
#ifndef SPOTDNN_SERVICES_DETECTOR_INSTANCE_WRAPPER_H_
#define SPOTDNN_SERVICES_DETECTOR_INSTANCE_WRAPPER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "services/detector/agent.h"
#include "services/detector/sample_forwarder.h"
#include "spotdnn/v1/profiler.pb.h"

namespace spotdnn::services {

// How the wrapped command ended.
struct ChildExit {
  bool signaled = false;  // killed by a signal
  int code = 0;           // its exit status, or the signal's number

  // The shell's convention: the exit status, or 128 + the signal.
  int ShellStatus() const { return signaled ? 128 + code : code; }
  // "exit status 3", "killed by signal 15 (Terminated)".
  std::string Describe() const;
};

// A signal by name or number: TERM, SIGTERM, INT, HUP, USR1, USR2, QUIT, KILL, ... or 1-64;
// "none" (or "0") is 0, no signal. INVALID_ARGUMENT naming `field` and the text otherwise.
absl::StatusOr<int> ParseSignal(absl::string_view field, absl::string_view text);

// `name` when it holds a '/', else the first executable file of that name in the folders of
// `path_variable` (the PATH's value; empty: /usr/local/bin:/usr/bin:/bin). NOT_FOUND naming it.
absl::StatusOr<std::string> FindProgram(const std::string& name, const std::string& path_variable);

// What to run and where its output goes.
struct WrappedCommandOptions {
  std::vector<std::string> argv;  // the program (looked up on PATH) and its arguments
  // Variables set in (or replacing those of) the agent's environment for the command.
  std::vector<std::pair<std::string, std::string>> env;
  int output_fd = 1;  // every line of its stdout and stderr is copied here (-1: nowhere)
  // If the agent dies while the command runs, the guard sends SIGTERM to the command's process
  // group and SIGKILL this long after.
  absl::Duration orphan_grace = absl::Seconds(10);
  size_t max_line = 1 << 20;  // a longer line is passed on in pieces of this size
};

// The user's command, running. Thread-safe.
//
// Process layout: the agent forks a guard that leads a new process group and forks the command
// in it. The guard ignores the signals the agent forwards to the group, reports the command's
// wait status to the agent over a socket, and when that socket closes without the agent having
// closed it (the agent was killed) stops the group: nothing the command started outlives the
// agent by more than orphan_grace.
class WrappedCommand {
 public:
  // Called on the output thread with each line (no newline), in order.
  using LineSink = std::function<void(absl::string_view line)>;

  // Starts the command. NOT_FOUND when the program is not found; INVALID_ARGUMENT for an empty
  // argv; INTERNAL when a pipe or fork fails.
  static absl::StatusOr<std::unique_ptr<WrappedCommand>> Start(WrappedCommandOptions options,
                                                               LineSink on_line);
  // Kills the process group if the command still runs, and reaps the guard.
  ~WrappedCommand();
  WrappedCommand(const WrappedCommand&) = delete;
  WrappedCommand& operator=(const WrappedCommand&) = delete;

  // The command's process group (the guard's pid).
  pid_t process_group() const { return guard_pid_; }
  // Sends `signal` to every process of the command's group (the guard ignores it). FAILED_
  // PRECONDITION once the group is gone.
  absl::Status Signal(int signal);
  // Waits up to `timeout` for the command to exit: how it ended, or nullopt while it runs.
  std::optional<ChildExit> Wait(absl::Duration timeout);
  // After the command exited: waits up to `timeout` for the rest of its output (processes it
  // started may still hold the pipe), then stops reading. True when the output ended.
  bool FinishOutput(absl::Duration timeout);
  // Lines passed on so far.
  uint64_t lines() const { return lines_.load(); }

 private:
  WrappedCommand() = default;
  void Pump();

  WrappedCommandOptions options_;
  LineSink on_line_;
  pid_t guard_pid_ = -1;
  int control_fd_ = -1;  // the agent's end of the socket to the guard
  int output_fd_ = -1;   // read end of the command's stdout/stderr pipe
  int wake_fd_[2] = {-1, -1};
  std::mutex mu_;
  std::optional<ChildExit> exit_;
  bool guard_reaped_ = false;
  std::atomic<bool> output_done_{false};
  std::atomic<uint64_t> lines_{0};
  std::thread pump_;
};

// What a sample line leaves out, filled from the instance's environment.
struct SampleDefaults {
  std::string job_id;         // SPOTDNN_JOB_ID
  std::string worker_id;      // the instance id
  std::string instance_type;  // SPOTDNN_INSTANCE_TYPE
  int cluster_workers = 0;    // SPOTDNN_WORKERS
  int batch_size = 0;         // SPOTDNN_BATCH_SIZE
};

// Reads SPOTDNN_SAMPLE lines (profiler/importers.h's parser and checks). Not thread-safe.
class SampleLineReader {
 public:
  explicit SampleLineReader(SampleDefaults defaults, int max_reasons = 10)
      : defaults_(std::move(defaults)), max_reasons_(max_reasons) {}

  // The sample a line holds, completed from the defaults and validated; nullopt for a line
  // without the marker and for a malformed one (counted, its reason kept while fewer than
  // max_reasons are).
  std::optional<::spotdnn::v1::Sample> Read(absl::string_view line);
  // Lines read, lines with the marker, and malformed ones among those.
  uint64_t lines() const { return lines_; }
  uint64_t sample_lines() const { return sample_lines_; }
  uint64_t malformed() const { return malformed_; }
  // "line N: reason" for the first malformed lines.
  const std::vector<std::string>& reasons() const { return reasons_; }

 private:
  SampleDefaults defaults_;
  int max_reasons_;
  uint64_t lines_ = 0;
  uint64_t sample_lines_ = 0;
  uint64_t malformed_ = 0;
  std::vector<std::string> reasons_;
};

// What the training process is told about a revocation notice.
struct NoticeInfo {
  std::string action;  // the cloud's: terminate, stop, hibernate, preempt, Preempt, ...
  std::string cloud;   // aws, gce, azure
  std::string instance_id;
  int64_t notice_unix_ms = 0;    // when the agent read it
  int64_t deadline_unix_ms = 0;  // when the instance goes (0: the cloud did not say)
};

// The notice file's one JSON object: {"kind":"notice","action":...,"cloud":...,"instance_id":
// ...,"notice_unix_ms":...,"deadline_unix_ms":...,"deadline":"2026-...Z" ("" when unknown)}.
std::string NoticeFileJson(const NoticeInfo& notice);

// Writes `content` to a temporary file beside `path`, syncs it and renames it over `path`, so a
// reader sees the old file or the whole new one. The error names the path.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view content);

// Everything the wrapper needs (spotdnn-agent's flags, resolved).
struct InstanceWrapperOptions {
  AgentOptions agent;                // notices (and the detector stream when detectors are set)
  std::vector<std::string> command;  // what to run
  std::string profiler;              // HOST:PORT; empty: samples are counted and logged only
  SampleForwarderOptions forwarder;
  absl::Duration report_deadline = absl::Seconds(10);  // one ReportSamples call
  SampleDefaults sample_defaults;
  int notice_signal = 15;   // 0: none
  std::string notice_file;  // written before the signal; SPOTDNN_NOTICE_FILE in the child
  absl::Duration flush_timeout = absl::Seconds(5);  // samples sent after the child exits
  // Checkpoint sync (empty uri: none): s3://BUCKET/PREFIX kept in sync with checkpoint_dir.
  std::string checkpoint_uri;
  std::string checkpoint_dir;
  absl::Duration checkpoint_interval = absl::Seconds(10);
  std::string s3_region;    // empty: us-east-1
  std::string s3_endpoint;  // empty: the region's S3 endpoint
  absl::Duration orphan_grace = absl::Seconds(10);
};

// Runs the wrapper until the command exits; returns the agent's exit status: the command's
// (128 + signal when it was killed), or 2 for bad options and 1 when the command cannot start or
// the checkpoint restore fails. SIGTERM and SIGINT must be blocked in every thread (see
// BlockShutdownSignals): they are received here and forwarded to the command's process group.
int RunInstanceWrapper(InstanceWrapperOptions options);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_DETECTOR_INSTANCE_WRAPPER_H_
