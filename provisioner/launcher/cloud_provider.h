// The launcher's view of a cloud: a CloudProvider turns a plan's instance counts into running
// instances (one type, one role at a time), describes and terminates them, and reads live spot
// prices. Implementations: LocalProvider (processes on this machine), AwsProvider (EC2 spot),
// GceProvider (Compute Engine Spot VMs) and AzureProvider (Azure Spot VMs); provider_factory.h
// makes the one a job spec names.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_CLOUD_PROVIDER_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_CLOUD_PROVIDER_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace spotdnn::launcher {

// What an instance does in a parameter-server job.
enum class Role { kParameterServer, kWorker };

// "ps" or "worker".
absl::string_view RoleName(Role role);
// Parses "ps" or "worker"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<Role> ParseRole(absl::string_view text);

// Lifecycle state, in EC2's words.
enum class InstanceState { kPending, kRunning, kShuttingDown, kTerminated, kStopping, kStopped };

// "pending", "running", "shutting-down", "terminated", "stopping", "stopped".
absl::string_view InstanceStateName(InstanceState state);
// Parses the names above; INVALID_ARGUMENT otherwise.
absl::StatusOr<InstanceState> ParseInstanceState(absl::string_view text);
// Terminated, or on its way there (shutting down): it no longer runs the job's command.
inline bool IsGone(InstanceState state) {
  return state == InstanceState::kTerminated || state == InstanceState::kShuttingDown;
}

// How an instance is bought: spot (cheap, revocable, limited by the cloud's spare capacity) or
// on-demand (the list price; never revoked). AWS: RunInstances with or without the spot market
// options; GCE: provisioning model SPOT or STANDARD; Azure: priority Spot or Regular.
enum class Market { kSpot, kOnDemand };

// "spot" or "on-demand".
absl::string_view MarketName(Market market);
// Parses "spot" or "on-demand" (empty: spot); INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<Market> ParseMarket(absl::string_view text);

// One request to launch `count` instances of one type for one job.
struct LaunchRequest {
  std::string job_id;         // tags every instance; required
  std::string instance_type;  // e.g. "g4dn.4xlarge"; required
  int count = 1;              // >= 1
  Role role = Role::kWorker;
  int first_index = 0;  // role index of the first instance (workers 0..N-1 across calls)
  std::string command;  // the user's start command (a shell command line)
  std::vector<std::string> ps_addresses;  // host:port of the parameter servers, for workers
  int batch_size = 0;                     // per-worker batch size (0 = not set)
  // Makes launches idempotent: the same token never launches twice (EC2 ClientToken). Empty: the
  // provider derives one from the job, role, type and first index.
  std::string client_token;
  std::map<std::string, std::string> extra_env;  // more environment for the command
  Market market = Market::kSpot;
  // Zones to try, in this order, when the first has no capacity (the next is tried before spot is
  // declared short); every one must be one the provider is configured for. Empty: the provider's
  // configured zones in their order.
  std::vector<std::string> zones;
  // Zones never launched in (a user's block list), whatever `zones` or the configuration say.
  std::vector<std::string> avoid_zones;
};

// How an instance's command ended on its own, where the provider can tell: the local provider
// reads the agent's last words ("the command ended: ...") from the instance's log. Processes
// killed together with their agent, or a VM the cloud took away, leave none: such an instance was
// lost, not finished.
struct CommandEnd {
  int status = 0;                       // the shell's: the exit status, or 128 + the signal
  std::string how;                      // "exit status 1", "killed by signal 15 (Terminated)"
  std::vector<std::string> last_lines;  // the command's last lines of output, oldest first
};

// The command end in the tail of an instance's log: the agent's last "the command ended: HOW"
// line, and up to `max_lines` of the command's lines before it (the agent's own lines and
// SPOTDNN_SAMPLE lines left out). Absent when the log has no such line.
std::optional<CommandEnd> CommandEndFromLog(absl::string_view log, int max_lines);

// One instance as the provider sees it.
struct Instance {
  std::string id;
  std::string instance_type;
  InstanceState state = InstanceState::kPending;
  std::string job_id;
  Role role = Role::kWorker;
  int index = 0;
  std::string private_address;  // IP (or 127.0.0.1 for local)
  std::string public_address;   // may be empty
  // Where a detector elsewhere can poll this instance's metadata service (the local provider's
  // emulator: http://127.0.0.1:PORT/i/ID). Empty for cloud instances: their metadata service
  // (169.254.169.254) answers only the instance itself, so its agent reports its notices.
  std::string metadata_endpoint;
  // Which cloud's metadata service the instance has ("aws", "gce", "azure"): how its notices
  // read. The local provider's instances have the AWS flavour.
  std::string metadata_cloud = "aws";
  // Where a parameter server serves (host:port) when the provider chose it (local: a free
  // loopback port); empty: PRIVATE_ADDRESS and the port the launch asked for.
  std::string service_address;
  absl::Time launch_time = absl::InfinitePast();
  Market market = Market::kSpot;  // as launched (where the provider reports it)
  // When it stopped, where the provider knows (local: the moment a revocation stopped it);
  // InfiniteFuture otherwise.
  absl::Time end_time = absl::InfiniteFuture();
  // Set for a terminated instance whose command ended on its own (see CommandEnd); absent while
  // it runs, when it was revoked or terminated, and where the provider cannot tell.
  std::optional<CommandEnd> command_end;
  // The zone it runs in (EC2's availability zone, GCE's zone, Azure's location and zone, the
  // local provider's capacity zone); empty where the provider does not say.
  std::string zone;
};

// The outcome of a launch: the instances started, and when fewer than asked for, why. A partial
// launch is OK with `error` set; callers must look at both.
struct LaunchResult {
  std::vector<Instance> instances;
  int requested = 0;
  absl::Status error;  // OK when all `requested` instances were launched
  // The zones that refused for lack of capacity on the way, "ZONE: why", in the order tried.
  std::vector<std::string> refused_zones;

  bool partial() const {
    return !instances.empty() && static_cast<int>(instances.size()) < requested;
  }
};

// A spot price observation.
struct SpotPrice {
  std::string instance_type;
  std::string availability_zone;
  double price_per_hour = 0;
  absl::Time timestamp = absl::InfinitePast();
};

// A cloud. Implementations are thread-compatible (one caller at a time) unless they say so.
class CloudProvider {
 public:
  virtual ~CloudProvider() = default;

  // "local", "aws", ...
  virtual std::string name() const = 0;

  // Where a person can read the instances' output, for error messages ("the instances' output is
  // in …"); empty when the provider keeps none.
  virtual std::string OutputLocation() const { return ""; }

  // The zones it is configured to launch `instance_type` in, in its order and in the names
  // LaunchRequest::zones takes; empty when it does not choose a zone (the cloud does).
  virtual std::vector<std::string> ZonesFor(const std::string& /*instance_type*/) const {
    return {};
  }

  // How likely a spot launch of `count` instances of the type is to succeed now in each zone it
  // launches in (ZonesFor's names), from 1 (unlikely) to 10, where the cloud tells; zones it does
  // not score are absent, and empty when the provider has no such hint. A hint to order zones of
  // the same price, never a promise.
  virtual absl::StatusOr<std::map<std::string, int>> SpotPlacementScores(
      const std::string& /*instance_type*/, int /*count*/) {
    return std::map<std::string, int>{};
  }

  // True when the instances see this machine's files (the local provider): a folder here can
  // hold what they share, such as parameter-server checkpoints.
  virtual bool SharesFilesWithCaller() const { return false; }

  // Launches request.count instances. Errors: INVALID_ARGUMENT for a bad request (naming the
  // field), RESOURCE_EXHAUSTED when the cloud has no capacity at the price (re-plan without the
  // type), UNAVAILABLE when retries ran out, PERMISSION_DENIED/UNAUTHENTICATED for credentials. A
  // partial launch returns a LaunchResult with instances and a non-OK `error`.
  virtual absl::StatusOr<LaunchResult> Launch(const LaunchRequest& request) = 0;

  // The job's instances (all jobs when `job_id` is empty), terminated ones included while the
  // provider still reports them.
  virtual absl::StatusOr<std::vector<Instance>> Describe(const std::string& job_id) = 0;

  // Terminates the instances (ids unknown to the provider: NOT_FOUND naming them).
  virtual absl::Status Terminate(const std::vector<std::string>& instance_ids) = 0;

  // The latest spot price per (type, availability zone) for `instance_types` in `region`
  // (empty region: the provider's own).
  virtual absl::StatusOr<std::vector<SpotPrice>> SpotPrices(
      const std::vector<std::string>& instance_types, const std::string& region) = 0;
};

// The lowest current price per type over its zones (types with no observation are absent).
std::map<std::string, double> CheapestPerType(const std::vector<SpotPrice>& prices);

// A default client token for a request: job, role, type, first index and count (stable across
// retries of the same request, different for different requests); at most 64 characters.
std::string DefaultClientToken(const LaunchRequest& request);

// A client token from a caller's own key: the key itself when it is printable ASCII of at most 64
// characters (EC2's limit), else "spotdnn-" and 40 hex digits of its SHA-256. Deterministic, so a
// resumed job asks with the same token.
std::string ClientTokenFor(const std::string& key);

// The environment a launched instance's command gets: SPOTDNN_JOB_ID, SPOTDNN_ROLE (ps|worker),
// SPOTDNN_INDEX, SPOTDNN_PS_ADDRESSES (comma-separated host:port), SPOTDNN_BATCH_SIZE (when set),
// SPOTDNN_INSTANCE_TYPE, SPOTDNN_INSTANCE_ID, SPOTDNN_METADATA_ENDPOINT, plus request.extra_env.
// `index` < 0, an empty `instance_id` or `metadata_endpoint` leave that variable out (the AWS
// user data sets them at boot).
std::map<std::string, std::string> InstanceEnvironment(const LaunchRequest& request, int index,
                                                       const std::string& instance_id,
                                                       const std::string& metadata_endpoint);

// Validates the parts of a request every provider needs (INVALID_ARGUMENT naming the field).
absl::Status ValidateLaunchRequest(const LaunchRequest& request);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_CLOUD_PROVIDER_H_
