// Launches a planned cluster through a CloudProvider: the parameter servers first (their
// addresses go to the workers), then the workers type by type with consecutive indexes. A type
// the cloud has no capacity for (RESOURCE_EXHAUSTED) is reported so that the planner can re-plan
// without it (ExcludeTypes); other errors stop the launch. Partial launches are reported.
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

// A cluster to launch for one job.
struct ClusterLaunchRequest {
  std::string job_id;
  std::string command;                               // the user's start command, for every instance
  std::vector<std::pair<std::string, int>> workers;  // (instance type, count), in launch order
  int parameter_servers = 1;
  std::string parameter_server_type = "m5.xlarge";
  // Port the parameter servers listen on (their addresses are PRIVATE_IP:PORT; they get it as
  // SPOTDNN_PS_PORT). When the provider reports 127.0.0.1 (local), server i listens on
  // local_ps_ports[i] instead, and every server gets the full SPOTDNN_PS_ADDRESSES list.
  int ps_port = 2222;
  std::vector<int> local_ps_ports;
  int batch_size = 0;
};

// What was launched.
struct ClusterLaunchResult {
  std::vector<Instance> instances;
  std::vector<std::string> ps_addresses;
  // Types the cloud had no capacity for, or not all of it: re-plan without them.
  std::vector<std::string> exhausted_types;
  std::map<std::string, int> shortfall;  // type -> instances asked for but not launched
  absl::Status error;                    // the first error other than capacity (OK when none)

  // True when every instance asked for is running.
  bool complete() const { return shortfall.empty() && error.ok(); }
};

// Launches `request` through `provider`. INVALID_ARGUMENT for a bad request (naming the field).
// When the parameter servers cannot be launched, nothing else is tried (the error is returned,
// with what did start in a partial result only if any did).
absl::StatusOr<ClusterLaunchResult> LaunchCluster(CloudProvider& provider,
                                                  const ClusterLaunchRequest& request);

// Sets the quota of each named type to 0 in `problem` (indexed like `catalog`), so that a re-plan
// leaves them out. INVALID_ARGUMENT naming a type the catalog does not have.
absl::Status ExcludeTypes(const predictor::InstanceCatalog& catalog,
                          const std::vector<std::string>& types, provisioner::PlanProblem& problem);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_CLUSTER_LAUNCHER_H_
