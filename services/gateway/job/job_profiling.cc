// A job's profiling step: its logs imported, its short runs made, the profile fitted.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/common/data_registry.h"
#include "services/gateway/job/job_run.h"
#include "services/gateway/job/revocation_feed.h"
#include "services/gateway/job/stop_rules.h"
#include "services/gateway/job/sync_launch.h"

namespace spotdnn::job {
namespace {

absl::Status WithContext(const absl::Status& status, const std::string& what) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// A synchronous profiling run's launch: the run's cluster as an elastic cluster at `rendezvous`,
// all of it needed (MIN = MAX), no restarts, the global batch (the spec's) split evenly over the
// ranks (the script rescales a remainder).
absl::StatusOr<launcher::ClusterLaunchRequest> SyncProfilingRequest(
    const std::string& run_id, const JobSpec& spec, const pb::InstanceCatalog& catalog,
    const std::vector<std::pair<std::string, int>>& counts, const std::string& rendezvous,
    const std::map<std::string, std::string>& env) {
  int instances = 0;
  int ranks = 0;
  std::map<std::string, int> gpus = RanksPerInstance(catalog);
  for (const auto& [type, n] : counts) {
    auto g = gpus.find(type);
    if (g == gpus.end()) {
      return absl::InvalidArgumentError(absl::StrCat("workload.profiling.runs: instance type \"",
                                                     type, "\" is not in the job's catalog"));
    }
    instances += n;
    ranks += n * g->second;
  }
  launcher::ElasticCluster cluster{
      .launch = {.job_id = run_id,
                 .rendezvous = rendezvous,
                 .min_instances = std::max(1, instances),
                 .max_instances = std::max(1, instances),
                 .max_restarts = 0,
                 .join_timeout_s = static_cast<int>(std::ceil(spec.elastic.join_timeout_s)),
                 .script = spec.worker_command},
      .global_batch = spec.global_batch,
      .worker_token_prefix = run_id + "-w-",
      .extra_env = env};
  int index = 0;
  for (const auto& [type, n] : counts) {
    cluster.groups.push_back(
        {.instance_type = type,
         .count = n,
         .first_index = index,
         .procs_per_instance = gpus[type],
         .local_batch = spec.global_batch > 0 && ranks > 0
                            ? std::max(1, static_cast<int>(std::lround(
                                              static_cast<double>(spec.global_batch) / ranks)))
                            : 0});
    index += n;
  }
  return launcher::ElasticClusterRequest(cluster);
}

// The spot price per hour of an instance of `type` in `catalog` (0: not listed).
double PriceOf(const pb::InstanceCatalog& catalog, const launcher::Instance& instance) {
  if (instance.role == launcher::Role::kParameterServer) {
    return catalog.parameter_server().spot_price_per_hour();
  }
  for (const pb::InstanceType& t : catalog.instance_types()) {
    if (t.name() == instance.instance_type) return t.spot_price_per_hour();
  }
  return 0;
}

// Launches one profiling run as its own job and waits until its workers have done their steps
// (they exit), then stops what is left (its parameter servers, a synchronous run's rendezvous).
absl::Status MakeRun(const std::string& run_id, const ProfilingRun& run, const JobSpec& spec,
                     const pb::InstanceCatalog& catalog, const JobServices& services,
                     const JobOptions& options, bool sync, base::Clock& clock,
                     const std::function<void(ProfilingEvent)>& emit, ProfilingAccount& account) {
  std::vector<std::pair<std::string, int>> counts(run.cluster.begin(), run.cluster.end());
  int workers = 0;
  std::vector<TypeCount> cluster;
  for (const auto& [type, n] : counts) {
    workers += n;
    cluster.push_back({type, n});
  }
  auto env = JobEnvironment(run_id, spec, options, *services.provider, workers, catalog.region());
  // A profiling run starts from nothing: what an earlier run of the same name checkpointed on
  // this machine (a job profiled again) would have it resume past its steps.
  if (auto dir = env.find("SPOTDNN_CHECKPOINT_DIR"); dir != env.end() &&
                                                     spec.checkpoint_uri.empty() &&
                                                     services.provider->SharesFilesWithCaller()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir->second, ignored);
  }
  // A synchronous run meets at a rendezvous of its own, stopped when the run is done.
  std::optional<RendezvousRecord> store;
  absl::Cleanup stop_store = [&] {
    if (store.has_value()) (void)StopRendezvous(run_id, *store);
  };
  absl::StatusOr<launcher::ClusterLaunchRequest> request;
  if (sync) {
    auto host = RendezvousHost(spec, *services.provider);
    if (!host.ok()) return host.status();
    // The store an interrupted earlier run of this name left (its gateway was killed) goes first.
    StopStaleRendezvous(run_id);
    auto started = StartRendezvous(run_id, *host, spec.elastic.port,
                                   RendezvousOptionsFor(run_id, *services.provider));
    if (!started.ok()) return WithContext(started.status(), "profiling run " + run_id);
    store = *started;
    request = SyncProfilingRequest(run_id, spec, catalog, counts, store->Endpoint(), env);
  } else {
    request = launcher::ClusterLaunchRequest{.job_id = run_id,
                                             .command = spec.worker_command,
                                             .ps_command = spec.ps_command,
                                             .parameter_servers = spec.parameter_servers,
                                             .workers = launcher::ConsecutiveGroups(counts),
                                             .ps_token = run_id + "-ps",
                                             .worker_token_prefix = run_id + "-w-",
                                             .extra_env = std::move(env)};
    if (!catalog.parameter_server().instance_type().empty()) {
      request->parameter_server_type = catalog.parameter_server().instance_type();
    }
  }
  if (!request.ok()) return WithContext(request.status(), "profiling run " + run_id);
  request->extra_env["SPOTDNN_MAX_STEPS"] = absl::StrCat(run.steps);
  // A gateway killed during this run (the job resumed, or run again) left its instances running:
  // they go before the run starts again (they would bill, and count as its workers).
  if (auto left = services.provider->Describe(run_id); left.ok()) {
    std::vector<std::string> stale;
    for (const launcher::Instance& i : *left) {
      if (!launcher::IsGone(i.state)) stale.push_back(i.id);
    }
    if (!stale.empty()) {
      if (absl::Status s = services.provider->Terminate(stale); !s.ok() && !absl::IsNotFound(s)) {
        return WithContext(s, absl::StrCat("stopping the instances an earlier ", run_id, " left"));
      }
    }
  }
  auto launched = launcher::LaunchCluster(*services.provider, *request);
  if (!launched.ok()) return WithContext(launched.status(), "launching " + run_id);
  std::vector<std::string> ids;
  double price_per_hour = 0;  // of the run's instances together
  for (const launcher::Instance& i : launched->instances) {
    ids.push_back(i.id);
    price_per_hour += PriceOf(catalog, i);
  }
  const absl::Time run_started = clock.Now();
  const double cost_before = account.cost_usd;
  // The run's instances are charged from their launch to their stop (all of them, to keep it
  // simple: the workers stop a little before the parameter servers).
  auto charge = [&] {
    account.cost_usd =
        cost_before + price_per_hour * absl::ToDoubleHours(clock.Now() - run_started);
    account.seconds = absl::ToDoubleSeconds(clock.Now() - account.started);
  };
  auto stop = [&] {
    absl::Status s = services.provider->Terminate(ids);
    charge();
    return s.ok() || absl::IsNotFound(s) ? absl::OkStatus() : s;
  };
  if (!launched->complete()) {
    (void)stop();  // the launch failed: what started goes, the error says why
    return absl::FailedPreconditionError(absl::StrCat(
        "profiling run ", run_id, " could not be launched: ",
        launched->error.ok()
            ? absl::StrCat("no capacity for ", absl::StrJoin(launched->exhausted_types, ", "))
            : std::string(launched->error.message())));
  }
  charge();
  emit({.run = run_id,
        .cluster = cluster,
        .steps = run.steps,
        .elapsed_s = account.seconds,
        .cost_usd = account.cost_usd});
  const absl::Time deadline = clock.Now() + options.profiling_timeout;
  absl::Time next_progress = clock.Now() + options.progress_every;
  // A cloud's VM runs on after its command ends: its agent's report of the end (through the
  // detector) says so. The local provider tells it from the instance itself.
  std::unique_ptr<RevocationFeed> feed =
      services.open_feed ? services.open_feed(run_id, 0) : nullptr;
  std::map<std::string, launcher::CommandEnd> ended;  // by the agents' reports
  const std::set<std::string> launched_ids(ids.begin(), ids.end());
  const int64_t steps_total = run.steps * workers;
  while (true) {
    if (clock.Now() >= next_progress) {
      // The run's own progress: its workers' steps (the profiler's count), time, cost, ETA.
      next_progress = clock.Now() + options.progress_every;
      auto progress = services.profiler->GetJobProgress(run_id);
      charge();
      ProfilingEvent e{.run = run_id,
                       .cluster = cluster,
                       .steps = run.steps,
                       .in_progress = true,
                       .steps_done = progress.ok() ? progress->total_steps() : 0,
                       .steps_total = steps_total,
                       .elapsed_s = account.seconds,
                       .cost_usd = account.cost_usd};
      const double run_s = absl::ToDoubleSeconds(clock.Now() - run_started);
      if (e.steps_done > 0 && run_s > 0) {
        e.eta_s = std::max<double>(0, steps_total - e.steps_done) * run_s / e.steps_done;
      }
      emit(std::move(e));
    }
    if (feed != nullptr) {
      for (const FeedItem& item : feed->Drain()) {
        if (!item.has_value() || item->kind() != pb::RevocationEvent::KIND_EXITED ||
            launched_ids.count(item->instance_id()) == 0) {
          continue;
        }
        ended[item->instance_id()] = {
            .status = item->exit_status(),
            .how = item->detail(),
            .last_lines = {item->last_lines().begin(), item->last_lines().end()}};
      }
    }
    auto described = services.provider->Describe(run_id);
    if (!described.ok()) return WithContext(described.status(), "watching " + run_id);
    for (launcher::Instance& i : *described) {
      if (auto e = ended.find(i.id); e != ended.end() && !i.command_end.has_value()) {
        i.command_end = e->second;
      }
    }
    const bool working =
        std::any_of(described->begin(), described->end(), [](const launcher::Instance& i) {
          return i.role == launcher::Role::kWorker && !launcher::IsGone(i.state) &&
                 !i.command_end.has_value();
        });
    if (!working) {
      // A worker command that failed (the provider or its agent can tell) ends the profiling
      // with its words.
      for (const launcher::Instance& i : *described) {
        if (i.role != launcher::Role::kWorker || !i.command_end.has_value() ||
            i.command_end->status == 0) {
          continue;
        }
        (void)stop();
        return absl::FailedPreconditionError(
            absl::StrCat("profiling run ", run_id, " failed: ",
                         FailedCommandText({.instance = i.id,
                                            .status = i.command_end->status,
                                            .how = i.command_end->how,
                                            .last_lines = i.command_end->last_lines})));
      }
      break;
    }
    if (clock.Now() >= deadline) {
      (void)stop();  // the timeout is the error reported
      return absl::DeadlineExceededError(
          absl::StrCat("profiling run ", run_id, " did not finish its ", run.steps,
                       " steps within ", absl::FormatDuration(options.profiling_timeout),
                       ": do the workers stop after $SPOTDNN_MAX_STEPS steps?"));
    }
    clock.Sleep(options.tick);
  }
  if (absl::Status s = stop(); !s.ok()) return WithContext(s, "stopping " + run_id);
  emit({.run = run_id,
        .cluster = cluster,
        .steps = run.steps,
        .run_done = true,
        .elapsed_s = account.seconds,
        .cost_usd = account.cost_usd});
  return absl::OkStatus();
}

}  // namespace

std::map<std::string, std::string> JobEnvironment(const std::string& job_id, const JobSpec& spec,
                                                  const JobOptions& options,
                                                  const launcher::CloudProvider& provider,
                                                  int workers, const std::string& region) {
  std::map<std::string, std::string> env = {
      {"SPOTDNN_PROFILER", options.profiler_address},
      {"SPOTDNN_DETECTOR", options.detector_address},
      {"SPOTDNN_WORKERS", absl::StrCat(workers)},
      {"SPOTDNN_PARAMETER_SERVERS", absl::StrCat(spec.parameter_servers)}};
  if (!spec.checkpoint_uri.empty()) {
    // On the instance: a local folder its agent keeps in sync with the URI.
    env["SPOTDNN_CHECKPOINT_URI"] = CheckpointUriIn(spec, job_id, region);
    env["SPOTDNN_CHECKPOINT_DIR"] = absl::StrCat("/var/tmp/spotdnn-checkpoints/", job_id);
  } else if (provider.SharesFilesWithCaller() && !options.checkpoint_root.empty()) {
    env["SPOTDNN_CHECKPOINT_DIR"] =
        (std::filesystem::path(options.checkpoint_root) / job_id).string();
  }
  return env;
}

absl::Status Profile(const JobSpec& spec, const pb::InstanceCatalog& catalog,
                     const services::DataRegistry& local, const JobServices& services,
                     const JobOptions& options, base::Clock& clock,
                     const std::function<void(ProfilingEvent)>& emit, ProfilingAccount& account) {
  // The runs train the way the job will: the spec's kind, else the base profile's.
  std::optional<pb::WorkloadProfile> base;
  if (!spec.profiling_base.empty()) {
    auto resolved = local.ResolveWorkload(spec.profiling_base);
    if (!resolved.ok()) return resolved.status();
    base = *std::move(resolved);
  }
  auto kind = ResolveSync(spec, base.has_value() ? base->sync() : pb::SYNC_KIND_PS);
  if (!kind.ok()) return kind.status();
  const bool sync = *kind == pb::SYNC_KIND_ALLREDUCE;
  if (sync && spec.elastic.check_script) {
    if (auto s = CheckTorchrunScript(spec.worker_command); !s.ok()) return s;
  }
  std::vector<std::string> job_ids;
  if (!spec.profiling_logs.empty()) {
    const std::string logs_job = spec.name + "-profiling";
    for (const std::string& log : spec.profiling_logs) {
      // Sent as content: the profiler may run elsewhere and reads no paths it is not allowed to.
      auto content = services::ReadFile(log);
      if (!content.ok()) return WithContext(content.status(), "workload.profiling.logs");
      pb::ImportLogRequest request;
      request.set_job_id(logs_job);
      request.set_path(std::filesystem::path(log).filename().string());
      request.set_content(*content);
      request.set_stop_on_error(true);
      auto imported = services.profiler->ImportLog(request);
      if (!imported.ok()) return WithContext(imported.status(), "importing " + log);
      emit({.imported_log = log});
    }
    job_ids.push_back(logs_job);
  }
  for (size_t k = 0; k < spec.profiling_runs.size(); ++k) {
    const std::string run_id = absl::StrCat(spec.name, "-profiling-", k + 1);
    if (absl::Status s = MakeRun(run_id, spec.profiling_runs[k], spec, catalog, services, options,
                                 sync, clock, emit, account);
        !s.ok()) {
      return s;
    }
    job_ids.push_back(run_id);
  }
  pb::FitProfileRequest fit;
  fit.set_name(spec.workload);
  for (const std::string& id : job_ids) fit.add_job_ids(id);
  if (base.has_value()) *fit.mutable_base() = *std::move(base);
  fit.set_parameter_server_bandwidth_mb_per_s(spec.profiling_ps_bandwidth);
  auto fitted = services.profiler->FitProfile(fit);
  if (!fitted.ok()) return WithContext(fitted.status(), "fitting the profile");
  account.seconds = absl::ToDoubleSeconds(clock.Now() - account.started);
  emit({.fitted_profile = spec.workload});
  return absl::OkStatus();
}

}  // namespace spotdnn::job
