// The plan's launch, and the capacity re-plan rounds when the cloud cannot fill it.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "services/common/convert.h"
#include "services/gateway/job/job_run.h"

namespace spotdnn::job {

absl::Status JobRun::Record(const launcher::Instance& instance, LaunchReason reason,
                            const std::string& token, double iteration_s) {
  if (instances_.count(instance.id) > 0) return absl::OkStatus();  // relaunch deduplicated
  const bool server = instance.role == launcher::Role::kParameterServer;
  InstanceRecord r{
      .job_id = job_.id,
      .id = instance.id,
      .role = instance.role,
      .instance_type = instance.instance_type,
      .index = instance.index,
      .reason = reason,
      .launch_token = token,
      .price_per_hour =
          server ? ps_price_ : PriceIn(instance.instance_type, instance.zone, instance.market),
      .predicted_iteration_s = iteration_s,
      .metadata_endpoint = instance.metadata_endpoint,
      .metadata_cloud = instance.metadata_cloud,
      .market = instance.market,
      .launched_ms = NowMs(),
      .zone = instance.zone};
  if (auto s = services_.store->PutInstance(r); !s.ok()) return s;
  instances_[r.id] = r;
  if (auto s = NoteMove(r); !s.ok()) return s;
  return Register(r);
}

absl::Status JobRun::Register(const InstanceRecord& instance) {
  if (services_.detector == nullptr) return absl::OkStatus();
  pb::WatchedInstance w;
  w.set_instance_id(instance.id);
  w.set_job_id(job_.id);
  auto cloud = services::ParseEnumLabel<pb::Cloud>(
      "metadata_cloud", instance.metadata_cloud.empty() ? "aws" : instance.metadata_cloud);
  w.set_cloud(cloud.ok() ? *cloud : pb::CLOUD_AWS);
  w.set_metadata_endpoint(instance.metadata_endpoint);
  w.set_instance_type(instance.instance_type);  // the detector keeps lifetimes per type
  absl::Status s = services_.detector->Register(w);
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat("registering ", instance.id, " with the detector: ", s.message()));
}

absl::StatusOr<launcher::ClusterLaunchResult> JobRun::Launch(
    const std::vector<TypeCount>& launch, int first_index, const std::string& token_prefix,
    const pb::Prediction& prediction, LaunchReason reason, bool with_servers,
    const std::set<std::string>& skip, launcher::Market market) {
  std::map<std::string, const pb::WorkerPrediction*> predicted;
  for (const pb::WorkerPrediction& w : prediction.workers()) predicted[w.instance_type()] = &w;
  const std::string ps_token = absl::StrCat(job_.id, "-ps");
  launcher::ClusterLaunchRequest request{
      .job_id = job_.id,
      .command = spec_.worker_command,
      .ps_command = spec_.ps_command,
      .parameter_servers = with_servers ? spec_.parameter_servers : 0,
      .parameter_server_type = ps_type_,
      .ps_addresses = absl::StrSplit(job_.ps_addresses, ',', absl::SkipEmpty()),
      .ps_token = with_servers ? ps_token : "",
      .worker_token_prefix = token_prefix};
  int workers = 0;  // the cluster's once this launch has run
  for (const auto& [id, i] : instances_) {
    workers += i.role == launcher::Role::kWorker && i.state == InstanceStatus::kRunning;
  }
  for (const TypeCount& c : launch) workers += c.count;
  request.extra_env =
      JobEnvironment(job_.id, spec_, options_, *services_.provider, workers, CheckpointRegion());
  int index = first_index;
  for (const TypeCount& c : launch) {
    const int first = index;
    index += c.count;
    if (skip.count(c.instance_type) > 0) continue;
    const pb::WorkerPrediction* p =
        predicted.count(c.instance_type) > 0 ? predicted[c.instance_type] : nullptr;
    launcher::WorkerGroup group{.instance_type = c.instance_type,
                                .count = c.count,
                                .first_index = first,
                                .batch_size = p != nullptr ? p->batch_size() : 0,
                                .market = market,
                                .zones = LaunchZones(c.instance_type)};
    group.env["SPOTDNN_PREDICTED_ITERATION_S"] =
        absl::StrFormat("%.6f", p != nullptr ? p->iteration_time_s() : 0.0);
    request.workers.push_back(std::move(group));
  }
  if (sync_) {
    // No parameter server: every instance runs torchrun around the script, at the rendezvous.
    auto elastic = SyncRequest(launch, first_index, token_prefix, prediction, market, workers);
    if (!elastic.ok()) return elastic.status();
    std::vector<launcher::WorkerGroup> groups;
    for (launcher::WorkerGroup& g : elastic->workers) {
      if (skip.count(g.instance_type) > 0) continue;
      for (const launcher::WorkerGroup& planned : request.workers) {
        if (planned.instance_type == g.instance_type)
          g.env.insert(planned.env.begin(), planned.env.end());
      }
      groups.push_back(std::move(g));
    }
    elastic->workers = std::move(groups);
    request = *std::move(elastic);
    for (launcher::WorkerGroup& g : request.workers) g.zones = LaunchZones(g.instance_type);
  }
  request.avoid_zones = spec_.zones.avoid;
  auto result = LaunchInRegions(request);
  if (!result.ok()) return result.status();
  NoteRefusals(result->refused_zones);
  if (with_servers && !sync_) job_.ps_addresses = absl::StrJoin(result->ps_addresses, ",");
  for (launcher::Instance i : result->instances) {
    if (i.role == launcher::Role::kWorker) i.market = market;  // as asked, whatever the cloud says
    if (i.role == launcher::Role::kParameterServer) {
      if (auto s = Record(i, LaunchReason::kPlan, launcher::ClientTokenFor(ps_token), 0); !s.ok()) {
        return s;
      }
      continue;
    }
    const pb::WorkerPrediction* p =
        predicted.count(i.instance_type) > 0 ? predicted[i.instance_type] : nullptr;
    if (auto s = Record(i, reason,
                        launcher::ClientTokenFor(
                            launcher::WorkerTokenKey(token_prefix, i.instance_type, market)),
                        p != nullptr ? p->iteration_time_s() : 0);
        !s.ok()) {
      return s;
    }
  }
  return result;
}

pb::Cluster JobRun::ClusterOf(const std::map<std::string, int>& counts) const {
  pb::Cluster cluster;
  for (const auto& [type, n] : counts) {
    pb::InstanceCount* c = cluster.add_instances();
    c->set_instance_type(type);
    c->set_count(n);
  }
  cluster.set_parameter_servers(spec_.parameter_servers);
  return cluster;
}

absl::StatusOr<pb::ReplanResponse> JobRun::RequestReplan(
    const std::map<std::string, int>& survivors, const pb::Cluster& before, double iterations_done,
    const std::map<std::string, int>& capped, const std::string& what, const pb::Slo* slo) {
  pb::ReplanRequest request;
  *request.mutable_workload()->mutable_profile() = workload_;
  *request.mutable_catalog()->mutable_catalog() = catalog_;
  if (slo != nullptr) {
    *request.mutable_slo() = *slo;
  } else {
    // As the first plan: profiling inside the job spent part of its deadline and budget (the
    // progress's elapsed time counts from the training's start).
    *request.mutable_slo() = SloOf(spec_);
    if (spec_.deadline_s > 0) request.mutable_slo()->set_deadline_s(ForecastDeadline());
    if (spec_.budget_usd > 0) {
      request.mutable_slo()->set_budget_usd(
          std::max(1e-9, spec_.budget_usd - job_.profiling_cost_usd));
    }
  }
  *request.mutable_options() = OptionsOf(spec_);
  if (sync_) {
    request.set_sync(pb::SYNC_KIND_ALLREDUCE);
    request.set_global_batch(spec_.global_batch);
  }
  if (!capped.empty()) {
    std::map<std::string, int> quotas(spec_.quotas.begin(), spec_.quotas.end());
    for (const auto& [type, n] : capped) quotas[type] = n;
    request.mutable_options()->clear_quota_overrides();
    for (const auto& [type, n] : quotas) {
      pb::InstanceCount* q = request.mutable_options()->add_quota_overrides();
      q->set_instance_type(type);
      q->set_count(n);
    }
  }
  pb::JobProgress* progress = request.mutable_progress();
  progress->set_normalized_iterations_done(iterations_done);
  progress->set_elapsed_s((NowMs() - job_.started_ms) / 1000.0);
  *progress->mutable_cluster_before() = before;
  *request.mutable_survivors() = ClusterOf(survivors);
  auto replan = services_.provisioner->Replan(request);
  if (!replan.ok()) {
    return absl::Status(replan.status().code(),
                        absl::StrCat(what, ": ", replan.status().message()));
  }
  return replan;
}

namespace {

// One launch of the plan's workers: the first, or one after a capacity re-plan.
struct Round {
  std::vector<TypeCount> launch;  // in launch order
  int first_index = 0;
  std::string token_prefix;
  pb::Prediction prediction;
  std::set<std::string> exhausted;  // types the cloud had no capacity for in this round
};

Round RoundOf(const std::string& job_id, const pb::Cluster& cluster, int first_index, int number,
              const pb::Prediction& prediction) {
  return Round{.launch = CountsOf(cluster),
               .first_index = first_index,
               .token_prefix = number == 0 ? absl::StrCat(job_id, "-w-")
                                           : absl::StrCat(job_id, "-capacity-", number, "-"),
               .prediction = prediction};
}

int CountSum(const std::vector<TypeCount>& counts) {
  int n = 0;
  for (const TypeCount& c : counts) n += c.count;
  return n;
}

}  // namespace

absl::Status JobRun::LaunchPlanned() {
  if (job_.started_ms == 0) {
    job_.started_ms = NowMs();
    if (auto s = Save(); !s.ok()) return s;
  }
  // The job's plan becomes a capacity re-plan's whole cluster, from iteration 0. The stored plan
  // stays the first one: a resumed gateway starts from it and replays the re-plans.
  auto adopt = [this](const pb::ReplanResponse& replan) {
    plan_ = replan.plan();
    job_.target_iterations = plan_.prediction().normalized_iterations();
    job_.predicted_time_s = plan_.time_s();
    job_.predicted_cost_usd = plan_.cost_usd();
  };
  std::vector<Round> rounds = {RoundOf(job_.id, plan_.cluster(), 0, 0, plan_.prediction())};
  std::map<std::string, int> capped;  // type -> the count it is held at

  // A resumed gateway: the re-plans made before it was stopped, in order.
  auto events = services_.store->Events(job_.id);
  if (!events.ok()) return events.status();
  for (const JobEventRecord& e : *events) {
    if (e.kind != "capacity-replan") continue;
    // Not const: operator[] on a missing key gives null here (on a const object it is undefined).
    nlohmann::json doc = nlohmann::json::parse(e.detail, nullptr, false);
    if (!doc.is_object() || !doc["exhausted"].is_object() || !doc["replan"].is_object() ||
        !doc["first_index"].is_number_integer()) {
      return absl::DataLossError(
          absl::StrCat("job ", job_.id, ": a capacity-replan event is not readable: ", e.detail));
    }
    pb::ReplanResponse replan;
    if (auto s = FromStoredJson(doc["replan"].dump(), "capacity re-plan", &replan); !s.ok()) {
      return s;
    }
    for (const auto& [type, n] : doc["exhausted"].items()) {
      rounds.back().exhausted.insert(type);
      capped[type] = n.is_number_integer() ? n.get<int>() : 0;
    }
    rounds.push_back(RoundOf(job_.id, replan.plan().to_launch(), doc["first_index"].get<int>(),
                             static_cast<int>(rounds.size()), replan.plan().prediction()));
    adopt(replan);
  }

  for (size_t r = 0; r < rounds.size(); ++r) {
    // Replayed types the cloud had no capacity for are skipped: what did start is on record.
    auto launched = Launch(
        rounds[r].launch, rounds[r].first_index, rounds[r].token_prefix, rounds[r].prediction,
        r == 0 ? LaunchReason::kPlan : LaunchReason::kCapacity, r == 0, rounds[r].exhausted);
    if (!launched.ok()) return launched.status();
    if (!launched->error.ok()) return launched->error;
    const int index = rounds[r].first_index + CountSum(rounds[r].launch);
    job_.next_worker_index = std::max(job_.next_worker_index, index);
    if (launched->exhausted_types.empty() || r + 1 < rounds.size()) continue;

    std::map<std::string, int> exhausted;  // type -> workers of it running after this round
    std::vector<std::string> why;
    std::vector<TypeCount> running;
    for (const std::string& type : launched->exhausted_types) {
      exhausted[type] = WorkersOf(type);
      capped[type] = exhausted[type];
      running.push_back({type, exhausted[type]});
      why.emplace_back(launched->capacity_errors[type].message());
    }
    if (auto s = Log("warning", absl::StrJoin(why, "; ")); !s.ok()) return s;
    Emit(CapacityEvent{.running = running});
    std::vector<std::string> types;
    for (const auto& [type, n] : exhausted)
      types.push_back(absl::StrCat(type, " (", n, " running)"));
    if (rounds.size() > static_cast<size_t>(catalog_.instance_types_size()) + 1) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no capacity for ", absl::StrJoin(types, ", "), " after ", rounds.size(),
                       " re-plans: ", absl::StrJoin(why, "; ")));
    }
    // Nothing trained yet: the job starts from the plan's cluster at iteration 0, with the
    // workers running now.
    auto replan = RequestReplan(LiveWorkers(), plan_.cluster(), 0, capped,
                                "re-planning around a type with no capacity");
    if (!replan.ok()) return replan.status();
    const bool fallback =
        std::all_of(exhausted.begin(), exhausted.end(),
                    [this](const auto& entry) { return GuardHandles(entry.first); });
    if (!replan->plan().feasible() && fallback) {
      // No spot plan meets the SLO: the plan's cluster stays, and the deadline guard runs what
      // spot cannot give on on-demand (job_deadline.cc).
      for (const auto& [type, n] : exhausted) {
        if (auto st = SpotShort(type, n + launched->shortfall[type]); !st.ok()) return st;
      }
      if (auto st = Log("warning", absl::StrCat("no spot capacity for ", absl::StrJoin(types, ", "),
                                                ", and without more of it no spot plan meets the "
                                                "SLO: the deadline guard decides on on-demand"));
          !st.ok()) {
        return st;
      }
      break;
    }
    if (!replan->plan().feasible()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "no capacity for %s, and without more of it no plan meets the SLO: %s (the earliest "
          "finish is %.0f s after the start)",
          absl::StrJoin(types, ", "), replan->plan().reason(), replan->best_finish_time_s()));
    }
    // Written before launching: a resumed gateway replays this round with the same tokens.
    nlohmann::json exhausted_json = nlohmann::json::object();
    for (const auto& [type, n] : exhausted) exhausted_json[type] = n;
    const nlohmann::json record = {{"first_index", index},
                                   {"exhausted", exhausted_json},
                                   {"replan", nlohmann::json::parse(ToStoredJson(*replan))}};
    if (auto st = Log("capacity-replan", record.dump()); !st.ok()) return st;
    adopt(*replan);
    if (auto st = Save(); !st.ok()) return st;
    rounds[r].exhausted.clear();
    for (const auto& [type, n] : exhausted) rounds[r].exhausted.insert(type);
    rounds.push_back(RoundOf(job_.id, replan->plan().to_launch(), index,
                             static_cast<int>(rounds.size()), replan->plan().prediction()));
    Emit(ReplannedEvent{.feasible = true,
                        .to_launch = rounds.back().launch,
                        .predicted_time_s = replan->plan().time_s(),
                        .predicted_cost_usd = replan->plan().cost_usd()});
  }
  job_.state = JobState::kRunning;
  if (auto s = Save(); !s.ok()) return s;
  int workers = 0;
  for (const auto& [type, n] : LiveWorkers()) workers += n;
  if (auto s = Log("launched", absl::StrCat(instances_.size(), " instances")); !s.ok()) return s;
  Emit(LaunchedEvent{.instances = static_cast<int>(instances_.size()),
                     .parameter_servers = spec_.parameter_servers,
                     .workers = workers,
                     .provider = services_.provider->name()});
  return absl::OkStatus();
}

}  // namespace spotdnn::job
