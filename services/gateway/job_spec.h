// A job for `spotdnn run`: what to train (a stored or built-in workload profile, or logs to
// profile first), the SLO, the catalog, the cloud, quotas and the commands the instances run.
// Documented with an example in deploy/examples/job.json.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_SPEC_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_SPEC_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace spotdnn::gateway {

struct JobSpec {
  std::string name;  // the job id: 1-64 of [A-Za-z0-9._-]
  // The workload profile: a name (the profiler's stored profiles first, then the built-ins) or a
  // JSON file.
  std::string workload;
  // Optional profiling step: these logs are imported into the profiler and fitted into the
  // profile `workload` names before planning (`profiling_base` supplies what they cannot tell).
  std::vector<std::string> profiling_logs;
  std::string profiling_base;
  std::string catalog;  // a name or a JSON file
  double target_loss = 0;
  double deadline_s = 0;  // 0: none (then budget_usd is required)
  double budget_usd = 0;  // 0: none
  std::string strategy = "exact";
  std::string provider = "local";  // "local" or "aws"
  std::string region;
  std::map<std::string, std::string> provider_options;  // aws: image_id, subnet_id, ...
  // local: capacity per type (provider.capacity), to rehearse a cloud's "no capacity" answer.
  std::map<std::string, int> local_capacity;
  std::map<std::string, int> quotas;  // per-type overrides
  int parameter_servers = 1;
  std::string worker_command;
  std::string ps_command;  // default: the worker command (SPOTDNN_ROLE tells them apart)
  double revocation_overhead_s = 0;
  // slo.confidence: plan the cheapest cluster that meets the deadline with this probability
  // (0: the plain plan) under the revocation model of slo.lifetimes (a lifetime CSV), else the
  // catalog's lifetimes or interruption rates; slo.notice and slo.takeover_delay time the
  // simulated takeovers (default 0 and the revocation overhead).
  double confidence = 0;
  std::string lifetimes;
  double notice_s = 0;
  double takeover_delay_s = -1;  // < 0: the revocation overhead
};

// Parses a job spec document. INVALID_ARGUMENT naming the field and the value.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& json);
// Reads and parses a job spec file (NOT_FOUND naming the path when it cannot be read).
absl::StatusOr<JobSpec> ReadJobSpec(const std::string& path);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_SPEC_H_
