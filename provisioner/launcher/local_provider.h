// The local provider, the embedded default: each instance is a process group on this machine
// running the user's command (through /bin/sh -c) with SPOTDNN_* environment variables saying
// its job, role, index, parameter-server addresses, batch size and type, and its own AWS-flavour
// metadata endpoint on a metadata emulator. Revoke() publishes a spot notice there and stops the
// process group at the notice time, as a cloud would.
//
// State lives in a directory (one `<id>.instance` file per instance, key=value lines, plus its
// `<id>.log`), so that another process (`spotdnn local list|revoke|terminate`) can find them.
// The process that launches instances owns them: its destructor terminates them, and a reaper
// process (forked at Create) kills their process groups if the owner dies without doing so.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_LOCAL_PROVIDER_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_LOCAL_PROVIDER_H_

#include <sys/types.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "provisioner/launcher/capacity_trace.h"
#include "provisioner/launcher/cloud_provider.h"

namespace spotdnn::launcher {

// Per-instance metadata endpoints for local instances (AWS IMDSv2 flavour).
class LocalMetadataService {
 public:
  virtual ~LocalMetadataService() = default;
  // The base URL instance `instance_id` reads its metadata from (its IMDS root).
  virtual std::string EndpointFor(const std::string& instance_id) const = 0;
  // Where another process reaches this service's control routes (empty: not reachable).
  virtual std::string ControlUrl() const = 0;
  // Publishes an AWS spot interruption notice for the instance: visible now, instance-action
  // "terminate" at `action_time`.
  virtual absl::Status PublishSpotNotice(const std::string& instance_id,
                                         absl::Time action_time) = 0;
};

// A LocalMetadataService backed by a metadata emulator (spotdnn-metadata-emulator or the
// in-process detector::MetadataEmulator) at `base_url` (http://127.0.0.1:PORT): endpoints are
// BASE/i/ID, notices go to its control route POST /emulator/notice.
class EmulatorMetadataClient final : public LocalMetadataService {
 public:
  explicit EmulatorMetadataClient(std::string base_url);
  std::string EndpointFor(const std::string& instance_id) const override;
  std::string ControlUrl() const override { return base_url_; }
  // UNAVAILABLE when the emulator cannot be reached or refuses the notice.
  absl::Status PublishSpotNotice(const std::string& instance_id, absl::Time action_time) override;

 private:
  std::string base_url_;
};

// The local provider.
class LocalProvider final : public CloudProvider {
 public:
  struct Options {
    // Required: where the instance files and logs go (created if missing).
    std::string state_dir;
    // The metadata service; null: instances get no metadata endpoint and Revoke stops them
    // without a notice (FAILED_PRECONDITION unless `allow_revoke_without_metadata`).
    std::shared_ptr<LocalMetadataService> metadata;
    bool allow_revoke_without_metadata = false;
    // Owner: launches, terminates its instances on destruction and runs the reaper. Not owner:
    // only looks at (and may revoke or terminate) instances another process launched.
    bool owner = true;
    // Instances outlive this process, as cloud instances outlive the program that launched them:
    // no reaper, and the destructor leaves them running (`spotdnn run` uses this so that a job
    // survives its gateway and `spotdnn run --resume` reattaches to it).
    bool detached = false;
    // Capacity per instance type: the most instances of the type that may run at once (a type
    // not listed has no limit). Beyond it Launch starts what fits and answers RESOURCE_EXHAUSTED
    // as a cloud with no spare capacity does (InsufficientInstanceCapacity), so that a planner's
    // re-planning without the type can be run and tested on one machine.
    std::map<std::string, int> capacity;
    // Spot capacity per type over time, replayed (capacity_trace.h): a spot launch beyond the
    // trace's count now fails as above, and when the count drops below the spot instances of the
    // type running, the newest get a spot notice (`trace_notice` ahead) and stop, as Revoke does.
    // On-demand instances are neither limited nor revoked. Applied at each Launch and Describe.
    // A key "TYPE@ZONE" is the type's capacity in that zone, as in a cloud with several zones: a
    // spot launch goes to the first zone of the request's `zones` (else of the type's zones, in
    // name order) with capacity for all it asks, the others are named in `refused_zones`, and a
    // drop in one zone revokes only the instances in it. Zones are independent of each other.
    std::map<std::string, CapacityTrace> capacity_trace;
    // Trace seconds per real second (3600: a trace hour per second, so tests take seconds).
    double capacity_trace_time_scale = 1;
    // The real time of trace time 0. InfinitePast: the time kept in the state dir for
    // `capacity_trace_job` (see CapacityTraceOriginPath), so that every process that runs a job's
    // instances (a resumed `spotdnn run` too) reads the trace at the same time.
    absl::Time capacity_trace_origin = absl::InfinitePast();
    // The job the trace is replayed for: each job keeps its own trace time 0.
    std::string capacity_trace_job;
    // With the origin kept in the state dir: false (a new job) replays the trace from its start,
    // now, and keeps that time in place of any kept before (a job of the same name run before);
    // true (a resumed job) continues from the kept time (now when none is kept).
    bool capacity_trace_resume = false;
    // How long before a trace revocation stops the instance. Zero: AWS's two minutes in trace
    // time (scaled), at least 3 s (for the detector, polling each second, to see the notice).
    absl::Duration trace_notice = absl::ZeroDuration();
    // Stopping: SIGTERM to the group, then SIGKILL after this long.
    absl::Duration stop_grace = absl::Seconds(2);
    std::string shell = "/bin/sh";
    // Put first on the instances' PATH (e.g. where spotdnn-agent and spotdnn-sim-worker are);
    // empty: the PATH this process has.
    std::string bin_dir;
    // The instance wrapper every command runs under (`WRAPPER /bin/sh -c COMMAND`, e.g.
    // "spotdnn-agent --cloud=aws --detector=none --"); empty: the command runs alone.
    std::string wrapper;
  };

  // INVALID_ARGUMENT for an empty state dir; INTERNAL when it cannot be created or the reaper
  // cannot be started.
  static absl::StatusOr<std::unique_ptr<LocalProvider>> Create(Options options);
  // An owner terminates every instance it launched that is still running.
  ~LocalProvider() override;
  LocalProvider(const LocalProvider&) = delete;
  LocalProvider& operator=(const LocalProvider&) = delete;

  std::string name() const override { return "local"; }
  // STATE_DIR/logs (a running instance's output is in STATE_DIR/ID.log until it is terminated).
  std::string OutputLocation() const override;
  bool SharesFilesWithCaller() const override { return true; }
  // Starts request.count process groups. The same client token (explicit or default) returns
  // the instances it launched before instead of starting more. FAILED_PRECONDITION when not the
  // owner; INTERNAL when a process cannot be started (a partial launch keeps the ones started).
  // Parameter servers listen on 127.0.0.1: on their own entry of request.ps_addresses when given,
  // else on a free port the provider picks (SPOTDNN_PS_PORT; every server gets the whole
  // SPOTDNN_PS_ADDRESSES list), reported as the instance's service_address.
  absl::StatusOr<LaunchResult> Launch(const LaunchRequest& request) override;
  // Instances from the state dir; state running while the process group has a member,
  // terminated afterwards. One that went by itself (neither terminated nor revoked) has its
  // command's end from the agent's log, unless it was killed with its agent (lost).
  absl::StatusOr<std::vector<Instance>> Describe(const std::string& job_id) override;
  // Stops the process groups (SIGTERM, then SIGKILL) and removes their files.
  absl::Status Terminate(const std::vector<std::string>& instance_ids) override;
  // Local machines have no spot market: UNIMPLEMENTED.
  absl::StatusOr<std::vector<SpotPrice>> SpotPrices(const std::vector<std::string>& instance_types,
                                                    const std::string& region) override;

  // Publishes a spot notice on the instance's metadata endpoint and stops its process group
  // `notice` later (in a background thread). NOT_FOUND for an unknown id, FAILED_PRECONDITION
  // when it is not running or is on-demand (never revoked).
  absl::Status Revoke(const std::string& instance_id, absl::Duration notice);
  // Blocks until every revocation scheduled by this object has stopped its instance.
  void WaitForRevocations();

  // Applies the capacity traces now (Launch and Describe do it first): revokes spot instances
  // beyond a type's count, newest first, and stops revoked instances whose notice ran out (a
  // revocation a process before this one scheduled). OK without traces.
  absl::Status ApplyCapacityTrace();
  // The spot capacity of `instance_type` now (in `zone`, for a type with zones): the trace's count
  // (with `capacity` as a cap), or -1 when neither limits it.
  int SpotCapacityNow(const std::string& instance_type, const std::string& zone = "");
  // The zones the capacity traces give `instance_type` ("TYPE@ZONE" keys), in name order.
  std::vector<std::string> ZonesOf(const std::string& instance_type) const;
  std::vector<std::string> ZonesFor(const std::string& instance_type) const override {
    return ZonesOf(instance_type);
  }

  // The process group of a running instance (for tests and the CLI); NOT_FOUND otherwise.
  absl::StatusOr<pid_t> ProcessGroup(const std::string& instance_id);
  const std::string& state_dir() const { return options_.state_dir; }

 private:
  struct Record;
  explicit LocalProvider(Options options);
  absl::Status StartReaper();
  void TellReaper(pid_t pgid, bool add);
  absl::StatusOr<Record> Load(const std::string& instance_id) const;
  std::vector<Record> LoadAll() const;
  absl::Status Save(const Record& record) const;
  void ReapOwned();
  bool Alive(const Record& record);
  void Stop(const Record& record);
  // Starts `command` under the shell (through the wrapper, when set) in a process group of its
  // own, with the parent's environment and `env` on top, its output appended to `log`; the group
  // is owned and told to the reaper's list by the caller.
  absl::StatusOr<pid_t> Spawn(const std::string& command,
                              const std::map<std::string, std::string>& env,
                              const std::string& log);
  std::string PathFor(const std::string& instance_id, const char* suffix) const;
  // Revoke() for a loaded record (the notice published, the stop scheduled).
  absl::Status RevokeRecord(Record record, absl::Duration notice);
  // Trace time now, in trace seconds.
  double TraceTimeNow() const;

  Options options_;
  int reaper_fd_ = -1;  // write end of the pipe to the reaper
  pid_t reaper_pid_ = -1;
  std::mutex mu_;
  std::set<pid_t> owned_;     // children this process started and has not reaped yet
  std::set<pid_t> launched_;  // process groups this process started and has not stopped
  std::condition_variable revocations_done_;
  int pending_revocations_ = 0;
  std::set<std::string> revoking_here_;  // instances whose stop this object scheduled
  bool shutting_down_ = false;
  std::vector<std::thread> revokers_;
};

// The default state dir: $SPOTDNN_HOME/local, else $HOME/.spotdnn/local, else ./.spotdnn/local.
std::string DefaultLocalStateDir();

// Where job `job`'s capacity trace time 0 is kept in `state_dir` (unix milliseconds, one line):
// STATE_DIR/capacity_trace_origin.JOB, or STATE_DIR/capacity_trace_origin without a job.
std::string CapacityTraceOriginPath(const std::string& state_dir, const std::string& job);

// A port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0). INTERNAL when
// no socket can be bound.
absl::StatusOr<int> FreeLoopbackPort();

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_LOCAL_PROVIDER_H_
