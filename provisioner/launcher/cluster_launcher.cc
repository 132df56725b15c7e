#include "provisioner/launcher/cluster_launcher.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace spotdnn::launcher {
namespace {

absl::Status Validate(const ClusterLaunchRequest& request) {
  if (request.parameter_servers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter_servers = ", request.parameter_servers, ": must be >= 0"));
  }
  if (request.parameter_servers > 0 && request.parameter_server_type.empty()) {
    return absl::InvalidArgumentError("parameter_server_type is empty");
  }
  if (request.ps_port < 1 || request.ps_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("ps_port = ", request.ps_port, ": must be in [1, 65535]"));
  }
  for (size_t i = 0; i < request.workers.size(); ++i) {
    const WorkerGroup& g = request.workers[i];
    if (g.count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("workers[", i, "] (", g.instance_type, ") = ", g.count, ": must be >= 0"));
    }
    if (g.first_index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("workers[", i, "].first_index = ", g.first_index, ": must be >= 0"));
    }
  }
  return absl::OkStatus();
}

std::string TokenFor(const std::string& key) { return key.empty() ? "" : ClientTokenFor(key); }

}  // namespace

std::string WorkerTokenKey(const std::string& prefix, const std::string& instance_type,
                           Market market) {
  return market == Market::kOnDemand ? absl::StrCat(prefix, instance_type, "-on-demand")
                                     : prefix + instance_type;
}

std::vector<WorkerGroup> ConsecutiveGroups(const std::vector<std::pair<std::string, int>>& counts,
                                           int first_index) {
  std::vector<WorkerGroup> groups;
  for (const auto& [type, count] : counts) {
    groups.push_back({.instance_type = type, .count = count, .first_index = first_index});
    first_index += std::max(count, 0);
  }
  return groups;
}

absl::StatusOr<ClusterLaunchResult> LaunchCluster(CloudProvider& provider,
                                                  const ClusterLaunchRequest& request) {
  if (absl::Status s = Validate(request); !s.ok()) return s;
  ClusterLaunchResult result;
  result.ps_addresses = request.ps_addresses;
  if (request.parameter_servers > 0) {
    LaunchRequest ps{.job_id = request.job_id,
                     .instance_type = request.parameter_server_type,
                     .count = request.parameter_servers,
                     .role = Role::kParameterServer,
                     .first_index = request.ps_first_index,
                     .command = request.ps_command.empty() ? request.command : request.ps_command,
                     .client_token = TokenFor(request.ps_token),
                     .extra_env = request.extra_env,
                     .zones = request.ps_zones,
                     .avoid_zones = request.avoid_zones};
    ps.extra_env["SPOTDNN_PS_PORT"] = absl::StrCat(request.ps_port);
    absl::StatusOr<LaunchResult> launched = provider.Launch(ps);
    if (!launched.ok()) return launched.status();
    result.refused_zones = launched->refused_zones;
    result.ps_addresses.clear();
    for (const Instance& instance : launched->instances) {
      result.ps_addresses.push_back(
          instance.service_address.empty()
              ? absl::StrCat(instance.private_address, ":", request.ps_port)
              : instance.service_address);
    }
    result.instances = launched->instances;
    if (!launched->error.ok()) {
      // Workers cannot be pointed at parameter servers that did not start.
      if (launched->instances.empty()) return launched->error;
      result.shortfall[request.parameter_server_type] =
          request.parameter_servers - static_cast<int>(launched->instances.size());
      result.error = launched->error;
      return result;
    }
  }
  for (const WorkerGroup& group : request.workers) {
    if (group.count == 0) continue;
    LaunchRequest workers{
        .job_id = request.job_id,
        .instance_type = group.instance_type,
        .count = group.count,
        .role = Role::kWorker,
        .first_index = group.first_index,
        .command = request.command,
        .ps_addresses = result.ps_addresses,
        .batch_size = group.batch_size,
        .client_token = request.worker_token_prefix.empty()
                            ? ""
                            : ClientTokenFor(WorkerTokenKey(request.worker_token_prefix,
                                                            group.instance_type, group.market)),
        .extra_env = request.extra_env,
        .market = group.market,
        .zones = group.zones,
        .avoid_zones = request.avoid_zones};
    for (const auto& [key, value] : group.env) workers.extra_env[key] = value;
    absl::StatusOr<LaunchResult> launched = provider.Launch(workers);
    const absl::Status status = launched.ok() ? launched->error : launched.status();
    int started = 0;
    if (launched.ok()) {
      result.refused_zones.insert(result.refused_zones.end(), launched->refused_zones.begin(),
                                  launched->refused_zones.end());
      started = static_cast<int>(launched->instances.size());
      result.instances.insert(result.instances.end(), launched->instances.begin(),
                              launched->instances.end());
    }
    if (started < group.count) result.shortfall[group.instance_type] = group.count - started;
    if (status.ok()) continue;
    if (absl::IsResourceExhausted(status)) {
      result.exhausted_types.push_back(group.instance_type);
      result.capacity_errors[group.instance_type] = status;
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
