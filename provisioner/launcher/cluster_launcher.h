// The one way a cluster is launched, whatever the cloud: the parameter servers first (their
// addresses go to the workers), then the workers group by group with the indexes the caller
// gives, each launch with a client token the cloud deduplicates on, so that a caller that died
// half-way can launch the same request again and get the same instances. A type the cloud has no
// capacity for (RESOURCE_EXHAUSTED) is reported so that the planner can re-plan around it; other
// errors stop the launch. Partial launches are reported.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_CLUSTER_LAUNCHER_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_CLUSTER_LAUNCHER_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "provisioner/launcher/cloud_provider.h"
#include "provisioner/planner.h"

namespace spotdnn::launcher {

// Workers of one instance type.
struct WorkerGroup {
  std::string instance_type;
  int count = 0;
  int first_index = 0;  // worker index of the first one; the others follow
  int batch_size = 0;   // per-worker batch (0: not set)
  // Environment for this group only (e.g. its predicted iteration time), on top of extra_env.
  std::map<std::string, std::string> env;
  Market market = Market::kSpot;  // on-demand: never revoked, not limited by spot capacity
  // Zones to try in order (LaunchRequest::zones); empty: the provider's.
  std::vector<std::string> zones;
};

// A cluster, or part of one, to launch for one job.
struct ClusterLaunchRequest {
  std::string job_id;
  std::string command;     // the workers' start command
  std::string ps_command;  // the parameter servers' (empty: `command`)
  // Parameter servers to launch first; 0 launches workers only, who join `ps_addresses`.
  int parameter_servers = 0;
  std::string parameter_server_type = "m5.xlarge";
  int ps_first_index = 0;  // index of the first one (a replacement keeps the index it replaces)
  // The port a cloud's parameter servers listen on (SPOTDNN_PS_PORT); their addresses are
  // PRIVATE_IP:PORT unless the provider reports a service address (the local provider picks
  // free ports itself).
  int ps_port = 2222;
  std::vector<std::string> ps_addresses;  // running parameter servers, when none are launched
  std::vector<WorkerGroup> workers;       // in launch order
  // Client tokens: ClientTokenFor(ps_token) for the servers and ClientTokenFor(worker_token_prefix
  // + TYPE) for each group (+ "-on-demand" for an on-demand group); empty: the provider derives
  // them from the request.
  std::string ps_token;
  std::string worker_token_prefix;
  std::map<std::string, std::string> extra_env;  // for every instance
  std::vector<std::string> ps_zones;             // the servers' zones to try, in order
  std::vector<std::string> avoid_zones;          // never launched in (every launch)
};

// What was launched.
struct ClusterLaunchResult {
  std::vector<Instance> instances;        // parameter servers first
  std::vector<std::string> ps_addresses;  // host:port of the parameter servers the workers use
  // Types the cloud had no capacity for, or not all of it: re-plan around them.
  std::vector<std::string> exhausted_types;
  std::map<std::string, absl::Status> capacity_errors;  // type -> what the cloud said
  std::map<std::string, int> shortfall;  // type -> instances asked for but not launched
  absl::Status error;                    // the first error other than capacity (OK when none)
  // Zones that refused for lack of capacity on the way ("ZONE: why"), every launch's.
  std::vector<std::string> refused_zones;

  // True when every instance asked for is running.
  bool complete() const { return shortfall.empty() && error.ok(); }
};

// The key of a worker group's client token: PREFIX + TYPE, and "-on-demand" after it for an
// on-demand group (spot groups keep the keys they always had).
std::string WorkerTokenKey(const std::string& prefix, const std::string& instance_type,
                           Market market);

// Groups of `counts` (type, count) in order, with consecutive worker indexes from `first_index`.
std::vector<WorkerGroup> ConsecutiveGroups(const std::vector<std::pair<std::string, int>>& counts,
                                           int first_index = 0);

// Launches `request` through `provider`. INVALID_ARGUMENT for a bad request (naming the field).
// When the parameter servers cannot all be launched, no worker is: the error is returned (a
// capacity error as RESOURCE_EXHAUSTED naming the type), or, when some did start, a result with
// them and `error` set.
absl::StatusOr<ClusterLaunchResult> LaunchCluster(CloudProvider& provider,
                                                  const ClusterLaunchRequest& request);

// Sets the quota of each named type to 0 in `problem` (indexed like `catalog`), so that a re-plan
// leaves them out. INVALID_ARGUMENT naming a type the catalog does not have.
absl::Status ExcludeTypes(const predictor::InstanceCatalog& catalog,
                          const std::vector<std::string>& types, provisioner::PlanProblem& problem);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_CLUSTER_LAUNCHER_H_
