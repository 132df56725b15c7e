#include "provisioner/launcher/cluster_launcher.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace spotdnn::launcher {

absl::StatusOr<ClusterLaunchResult> LaunchCluster(CloudProvider& provider,
                                                  const ClusterLaunchRequest& request) {
  if (request.parameter_servers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter_servers = ", request.parameter_servers, ": must be >= 0"));
  }
  for (size_t i = 0; i < request.workers.size(); ++i) {
    if (request.workers[i].second < 0) {
      return absl::InvalidArgumentError(absl::StrCat("workers[", i, "] (", request.workers[i].first,
                                                     ") = ", request.workers[i].second,
                                                     ": must be >= 0"));
    }
  }
  ClusterLaunchResult result;
  if (request.parameter_servers > 0) {
    LaunchRequest ps_request{.job_id = request.job_id,
                             .instance_type = request.parameter_server_type,
                             .count = request.parameter_servers,
                             .role = Role::kParameterServer,
                             .command = request.command,
                             .batch_size = request.batch_size};
    // A cloud server listens on SPOTDNN_PS_PORT; local ones on their own entry of
    // SPOTDNN_PS_ADDRESSES (known before launch: they share 127.0.0.1).
    ps_request.extra_env["SPOTDNN_PS_PORT"] = absl::StrCat(request.ps_port);
    for (int port : request.local_ps_ports) {
      ps_request.ps_addresses.push_back(absl::StrCat("127.0.0.1:", port));
    }
    absl::StatusOr<LaunchResult> ps = provider.Launch(ps_request);
    if (!ps.ok()) return ps.status();
    for (size_t i = 0; i < ps->instances.size(); ++i) {
      const Instance& instance = ps->instances[i];
      int port = request.ps_port;
      if (instance.private_address == "127.0.0.1" && i < request.local_ps_ports.size()) {
        port = request.local_ps_ports[i];
      }
      result.ps_addresses.push_back(absl::StrCat(instance.private_address, ":", port));
    }
    result.instances = ps->instances;
    if (!ps->error.ok()) {
      // Workers cannot be pointed at parameter servers that did not start.
      result.shortfall[request.parameter_server_type] =
          request.parameter_servers - static_cast<int>(ps->instances.size());
      result.error = ps->error;
      return result;
    }
  }
  int next_index = 0;
  for (const auto& [type, count] : request.workers) {
    if (count == 0) continue;
    const int first_index = next_index;
    next_index += count;
    absl::StatusOr<LaunchResult> launched = provider.Launch({.job_id = request.job_id,
                                                             .instance_type = type,
                                                             .count = count,
                                                             .role = Role::kWorker,
                                                             .first_index = first_index,
                                                             .command = request.command,
                                                             .ps_addresses = result.ps_addresses,
                                                             .batch_size = request.batch_size});
    absl::Status status = launched.ok() ? launched->error : launched.status();
    int started = 0;
    if (launched.ok()) {
      started = static_cast<int>(launched->instances.size());
      result.instances.insert(result.instances.end(), launched->instances.begin(),
                              launched->instances.end());
    }
    if (started < count) result.shortfall[type] = count - started;
    if (status.ok()) continue;
    if (absl::IsResourceExhausted(status)) {
      result.exhausted_types.push_back(type);
      continue;
    }
    result.error = status;
    break;
  }
  return result;
}

absl::Status ExcludeTypes(const predictor::InstanceCatalog& catalog,
                          const std::vector<std::string>& types,
                          provisioner::PlanProblem& problem) {
  if (problem.max_counts.size() != catalog.types.size()) {
    return absl::InvalidArgumentError(absl::StrCat("max_counts has ", problem.max_counts.size(),
                                                   " entries; the catalog has ",
                                                   catalog.types.size(), " types"));
  }
  for (const std::string& type : types) {
    int index = catalog.IndexOf(type);
    if (index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance type \"", type, "\" is not in catalog ", catalog.name));
    }
    problem.max_counts[index] = 0;
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::launcher
