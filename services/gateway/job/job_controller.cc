#include "services/gateway/job/job_controller.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "services/common/convert.h"
#include "services/gateway/job/job_run.h"
#include "services/gateway/job/lifetimes.h"
#include "services/gateway/job/sync_launch.h"

namespace spotdnn::job {

std::string ToStoredJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  // Cannot fail for a message this process built (no Any fields).
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) out.clear();
  return out;
}

absl::Status FromStoredJson(const std::string& json, absl::string_view what,
                            google::protobuf::Message* message) {
  auto status = google::protobuf::util::JsonStringToMessage(json, message);
  if (!status.ok()) {
    return absl::DataLossError(
        absl::StrCat("stored ", what, " cannot be read: ", status.ToString()));
  }
  return absl::OkStatus();
}

pb::Slo SloOf(const JobSpec& spec) {
  pb::Slo slo;
  SetSloTarget(spec, &slo);  // loss, iterations, epochs or a metric target
  slo.set_deadline_s(spec.deadline_s);
  slo.set_budget_usd(spec.budget_usd);
  return slo;
}

pb::PlanOptions OptionsOf(const JobSpec& spec) {
  pb::PlanOptions options;
  options.set_strategy(spec.strategy);
  for (const auto& [type, n] : spec.quotas) {
    pb::InstanceCount* q = options.add_quota_overrides();
    q->set_instance_type(type);
    q->set_count(n);
  }
  options.set_parameter_servers(spec.parameter_servers);
  options.set_revocation_overhead_s(spec.revocation_overhead_s);
  options.set_zone(spec.zones.zone);
  options.set_region(spec.zones.region);
  for (const std::string& zone : spec.zones.avoid) options.add_avoid_zones(zone);
  return options;
}

std::vector<TypeCount> CountsOf(const pb::Cluster& cluster) {
  std::vector<TypeCount> out;
  for (const pb::InstanceCount& c : cluster.instances()) {
    if (c.count() > 0) out.push_back({c.instance_type(), c.count()});
  }
  return out;
}

namespace {

// The workload profile a job trains: the profiler's stored profile of that name (fitted from
// its profiling step first when it has one); else a built-in or a file.
absl::StatusOr<pb::WorkloadProfile> ResolveWorkload(const JobSpec& spec,
                                                    const clients::ProfilerClient& profiler,
                                                    const services::DataRegistry& local) {
  if (services::LooksLikePath(spec.workload)) return local.ResolveWorkload(spec.workload);
  auto stored = profiler.GetProfile(spec.workload);
  if (stored.ok()) return stored;
  if (!absl::IsNotFound(stored.status())) {
    return absl::Status(stored.status().code(), absl::StrCat("profile \"", spec.workload,
                                                             "\": ", stored.status().message()));
  }
  return local.ResolveWorkload(spec.workload);
}

}  // namespace

JobController::JobController(JobServices services, JobOptions options, JobEventSink sink)
    : services_(std::move(services)), options_(std::move(options)), sink_(std::move(sink)) {
  if (services_.clock == nullptr) services_.clock = &real_clock_;
  if (!services_.open_feed && services_.detector != nullptr) {
    const clients::DetectorClient* detector = services_.detector;
    services_.open_feed = [detector](const std::string& job_id, uint64_t after) {
      return std::unique_ptr<RevocationFeed>(new DetectorFeed(*detector, job_id, after));
    };
  }
}

absl::StatusOr<JobRecord> JobController::Plan(const std::string& spec_json,
                                              const services::DataRegistry& local) {
  auto spec = ParseJobSpec(spec_json);
  if (!spec.ok()) return spec.status();
  // A job stored but never planned (its profiling failed or was cut off, or no plan met the SLO
  // after it) is made again; the caller holds the job's lock, so no gateway is profiling it.
  auto existing = services_.store->GetJob(spec->name);
  const bool remake =
      existing.ok() && existing->plan_json.empty() && existing->started_ms == 0 &&
      (existing->state == JobState::kProfiling || existing->state == JobState::kFailed);
  if (existing.ok() && !remake) {
    return absl::AlreadyExistsError(absl::StrCat(
        "job \"", spec->name, "\" already exists: resume it with `spotdnn run --resume ",
        spec->name, "` or give the job another name"));
  }
  base::Clock& clock = *services_.clock;
  auto emit = [&](auto what) {
    if (sink_) sink_(JobEvent{.at = clock.Now(), .job_id = spec->name, .what = std::move(what)});
  };
  auto catalog = local.ResolveCatalog(spec->catalog);
  if (!catalog.ok()) return catalog.status();
  // With a profiling step the job is stored from its start (state profiling), so `jobs` and
  // `status` show it, and its time and cost are the job's: counted in its deadline and budget.
  JobRecord stored{.id = spec->name,
                   .spec_json = spec_json,
                   .state = JobState::kProfiling,
                   .created_ms = absl::ToUnixMillis(clock.Now())};
  bool is_stored = remake;
  // Marks a stored job failed before its launch (the error is returned as it is).
  auto fail_stored = [&](const absl::Status& why) {
    if (!is_stored) return why;
    stored.state = JobState::kFailed;
    stored.message = std::string(why.message());
    (void)services_.store->UpdateJob(stored);  // the error returned is the one to report
    (void)services_.store->AddEvent(stored.id, "failed", stored.message,
                                    absl::ToUnixMillis(clock.Now()));
    return why;
  };
  if (spec->HasProfiling()) {
    stored.profiling_started_ms = stored.created_ms;
    if (auto st = remake ? services_.store->UpdateJob(stored) : services_.store->CreateJob(stored);
        !st.ok()) {
      return st;
    }
    is_stored = true;
    if (auto st = services_.store->AddEvent(stored.id, "profiling", "started", stored.created_ms);
        !st.ok()) {
      return st;
    }
    ProfilingAccount account{.started = clock.Now()};
    absl::Status s = Profile(
        *spec, *catalog, local, services_, options_, clock,
        [&](ProfilingEvent e) {
          // Kept in the store as it goes, for `jobs` and `status`.
          stored.profiling_s = account.seconds;
          stored.profiling_cost_usd = account.cost_usd;
          (void)services_.store->UpdateJob(stored);
          emit(std::move(e));
        },
        account);
    stored.profiling_s = absl::ToDoubleSeconds(clock.Now() - account.started);
    stored.profiling_cost_usd = account.cost_usd;
    if (!s.ok()) return fail_stored(s);
    if (auto st = services_.store->UpdateJob(stored); !st.ok()) return st;
    if (auto st = services_.store->AddEvent(
            stored.id, "profiled",
            absl::StrFormat("%.1f s, $%.4f", stored.profiling_s, stored.profiling_cost_usd),
            absl::ToUnixMillis(clock.Now()));
        !st.ok()) {
      return st;
    }
    if (spec->deadline_s > 0 && stored.profiling_s >= spec->deadline_s) {
      return fail_stored(absl::FailedPreconditionError(
          absl::StrFormat("profiling took %.1f s of the %.1f s deadline: no time is left to train",
                          stored.profiling_s, spec->deadline_s)));
    }
  }
  auto workload = ResolveWorkload(*spec, *services_.profiler, local);
  if (!workload.ok()) return fail_stored(workload.status());
  pb::PlanRequest request;
  *request.mutable_workload()->mutable_profile() = *workload;
  *request.mutable_catalog()->mutable_catalog() = *catalog;
  *request.mutable_slo() = SloOf(*spec);
  // Profiling inside the job spent part of its deadline and budget: the plan gets the rest.
  if (spec->deadline_s > 0) {
    request.mutable_slo()->set_deadline_s(spec->deadline_s - stored.profiling_s);
  }
  if (spec->budget_usd > 0) {
    request.mutable_slo()->set_budget_usd(
        std::max(1e-9, spec->budget_usd - stored.profiling_cost_usd));
  }
  request.set_mode(spec->deadline_s > 0 ? pb::PLAN_MODE_DEADLINE : pb::PLAN_MODE_BUDGET);
  // How it trains: the spec's kind, else the profile's; a synchronous plan splits the global
  // batch (the spec's, else the profile's) and has no parameter servers.
  auto sync = ResolveSync(*spec, workload->sync());
  if (!sync.ok()) return fail_stored(sync.status());
  if (*sync == pb::SYNC_KIND_ALLREDUCE) spec->parameter_servers = 0;
  if (*sync == pb::SYNC_KIND_ALLREDUCE && spec->elastic.check_script) {
    if (auto s = CheckTorchrunScript(spec->worker_command); !s.ok()) return fail_stored(s);
  }
  *request.mutable_options() = OptionsOf(*spec);
  if (*sync == pb::SYNC_KIND_ALLREDUCE) {
    request.set_sync(*sync);
    request.set_global_batch(spec->global_batch);
  }
  if (spec->confidence > 0) {
    // The cheapest plan that meets the deadline with this probability (slo.confidence).
    pb::PlanOptions& options = *request.mutable_options();
    options.set_confidence(spec->confidence);
    pb::SimulationOptions& simulation = *options.mutable_simulation();
    if (!spec->lifetimes.empty()) {
      if (auto st = AddLifetimeFile(spec->lifetimes, 24 * 3600.0, &simulation); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat("slo.lifetimes: ", st.message()));
      }
    }
    simulation.set_notice_s(spec->notice_s);
    // A synchronous job's revocation cost: every rank restarts, on at least its elastic minimum.
    if (*sync == pb::SYNC_KIND_ALLREDUCE) {
      simulation.set_sync(*sync);
      simulation.set_min_instances(spec->elastic.min_instances);
    }
    if (spec->takeover_delay_s >= 0) simulation.set_takeover_delay_s(spec->takeover_delay_s);
  }
  auto response = services_.provisioner->Plan(request);
  if (!response.ok()) {
    return fail_stored(absl::Status(response.status().code(),
                                    absl::StrCat("planning: ", response.status().message())));
  }
  const pb::Plan& plan = response->plan();
  if (!plan.feasible() && !plan.has_risk() && response->plain_plan().feasible()) {
    return fail_stored(
        absl::FailedPreconditionError(absl::StrCat("slo.confidence: ", plan.reason())));
  }
  if (!plan.feasible()) {
    // The budget too small: the cheapest plan; else the fastest. The provisioner's reason names
    // one of them already: said once.
    const bool budget = response->cheapest_cost_usd() > 0;
    const bool named = absl::StrContains(plan.reason(), budget ? "the cheapest" : "the fastest");
    return fail_stored(absl::FailedPreconditionError(absl::StrCat(
        "no plan meets the SLO: ", plan.reason(),
        named ? ""
              : absl::StrFormat(
                    " (the %s takes %.0f s at $%.2f)", budget ? "cheapest" : "fastest",
                    budget ? response->cheapest_time_s() : response->fastest_time_s(),
                    budget ? response->cheapest_cost_usd() : response->fastest_cost_usd()))));
  }
  const int64_t now_ms = absl::ToUnixMillis(clock.Now());
  JobRecord job = stored;
  job.state = JobState::kLaunching;
  job.message.clear();
  job.created_ms = is_stored ? stored.created_ms : now_ms;
  job.workload_json = ToStoredJson(*workload);
  job.catalog_json = ToStoredJson(*catalog);
  job.plan_json = ToStoredJson(plan);
  job.target_iterations = plan.prediction().normalized_iterations();
  job.predicted_time_s = plan.time_s();
  job.predicted_cost_usd = plan.cost_usd();
  if (auto st = is_stored ? services_.store->UpdateJob(job) : services_.store->CreateJob(job);
      !st.ok()) {
    return st;
  }
  std::vector<std::string> cluster;
  for (const TypeCount& c : CountsOf(plan.cluster())) {
    cluster.push_back(absl::StrCat(c.instance_type, "=", c.count));
  }
  if (auto st = services_.store->AddEvent(job.id, "planned", absl::StrJoin(cluster, ","), now_ms);
      !st.ok()) {
    return st;
  }
  emit(PlannedEvent{.cluster = CountsOf(plan.cluster()),
                    .target_iterations = job.target_iterations,
                    .predicted_time_s = plan.time_s(),
                    .predicted_cost_usd = plan.cost_usd(),
                    .strategy = services::EnumLabel(plan.strategy()),
                    .p_meet_deadline = plan.has_risk() ? plan.risk().p_meet_deadline() : -1,
                    .simulated_runs = plan.has_risk() ? plan.risk().runs() : 0});
  return job;
}

absl::StatusOr<JobOutcome> JobController::Run(const std::string& job_id) {
  detach_.store(false);
  auto record = services_.store->GetJob(job_id);
  if (!record.ok()) return record.status();
  if (record->state == JobState::kProfiling) {
    return absl::FailedPreconditionError(
        absl::StrCat("job \"", job_id,
                     "\" was cut off while profiling, before its plan: start it again with "
                     "`spotdnn run JOB.json` (its profiling runs again)"));
  }
  if (!IsDone(record->state)) {
    auto spec = ParseJobSpec(record->spec_json);
    if (!spec.ok()) return spec.status();
    JobRun run(*std::move(record), *std::move(spec), services_, options_, sink_, *services_.clock,
               detach_);
    record = run.Run();
    if (!record.ok()) return record.status();
  }
  auto summary = SummarizeJob(*services_.store, job_id, absl::ToUnixMillis(services_.clock->Now()));
  if (!summary.ok()) return summary.status();
  return JobOutcome{.record = *std::move(record), .summary = *std::move(summary)};
}

}  // namespace spotdnn::job
