#include "services/gateway/job_runner.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "services/common/convert.h"
#include "services/gateway/output.h"

namespace spotdnn::gateway {
namespace {

using launcher::Instance;
using launcher::LaunchRequest;
using launcher::Role;

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

template <typename M>
absl::StatusOr<M> FromJson(const std::string& json, absl::string_view what) {
  M message;
  auto status = google::protobuf::util::JsonStringToMessage(json, &message);
  if (!status.ok()) {
    return absl::DataLossError(
        absl::StrCat("stored ", what, " cannot be read: ", status.ToString()));
  }
  return message;
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

template <typename F>
grpc::Status Call(F&& f, absl::Duration timeout = absl::Seconds(60)) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return f(context);
}

void Emit(RunnerEnv& env, const std::string& kind, const std::string& line, JsonObject json) {
  if (env.on_update) {
    env.on_update({kind, line, json.String("event", kind).Integer("at_unix_ms", NowMs()).str()});
  }
}

pb::PlanStrategy StrategyOf(const std::string& name) {
  return name == "spotdnn"      ? pb::PLAN_STRATEGY_SPOTDNN
         : name == "exhaustive" ? pb::PLAN_STRATEGY_EXHAUSTIVE
                                : pb::PLAN_STRATEGY_EXACT;
}

pb::PlanOptions OptionsOf(const JobSpec& spec) {
  pb::PlanOptions options;
  options.set_strategy(StrategyOf(spec.strategy));
  for (const auto& [type, n] : spec.quotas) {
    pb::InstanceCount* q = options.add_quota_overrides();
    q->set_instance_type(type);
    q->set_count(n);
  }
  options.set_parameter_servers(spec.parameter_servers);
  options.set_revocation_overhead_s(spec.revocation_overhead_s);
  return options;
}

pb::Slo SloOf(const JobSpec& spec) {
  pb::Slo slo;
  slo.set_target_loss(spec.target_loss);
  slo.set_deadline_s(spec.deadline_s);
  slo.set_budget_usd(spec.budget_usd);
  return slo;
}

// The workload profile a job trains: fitted from its profiling logs first when it has them; else
// the profiler's stored profile of that name; else a built-in or a file.
absl::StatusOr<pb::WorkloadProfile> ResolveWorkload(const JobSpec& spec, RunnerEnv& env,
                                                    const services::DataRegistry& local) {
  if (services::LooksLikePath(spec.workload)) return local.ResolveWorkload(spec.workload);
  if (!spec.profiling_logs.empty()) {
    const std::string run = spec.name + "-profiling";
    for (const std::string& log : spec.profiling_logs) {
      // Sent as content: the profiler may run elsewhere, and reads paths only under its
      // --import_root.
      auto content = services::ReadFile(log);
      if (!content.ok()) return content.status();
      pb::ImportLogRequest request;
      request.set_job_id(run);
      request.set_path(std::filesystem::path(log).filename().string());
      request.set_content(*content);
      request.set_stop_on_error(true);
      pb::ImportLogResponse response;
      grpc::Status s = Call(
          [&](grpc::ClientContext& c) { return env.profiler->ImportLog(&c, request, &response); });
      if (auto st = FromGrpc(s, absl::StrCat("importing ", log)); !st.ok()) return st;
      Emit(env, "profiling", absl::StrCat("Imported ", log), JsonObject().String("log", log));
    }
    pb::FitProfileRequest fit;
    fit.set_name(spec.workload);
    fit.add_job_ids(run);
    if (!spec.profiling_base.empty()) {
      auto base = local.ResolveWorkload(spec.profiling_base);
      if (!base.ok()) return base.status();
      *fit.mutable_base() = *std::move(base);
    }
    pb::FitProfileResponse fitted;
    grpc::Status s =
        Call([&](grpc::ClientContext& c) { return env.profiler->FitProfile(&c, fit, &fitted); });
    if (auto st = FromGrpc(s, "fitting the profile"); !st.ok()) return st;
    Emit(env, "profiling", absl::StrCat("Fitted profile ", spec.workload),
         JsonObject().String("profile", spec.workload));
  }
  pb::GetProfileRequest get;
  get.set_name(spec.workload);
  pb::WorkloadProfile stored;
  grpc::Status s =
      Call([&](grpc::ClientContext& c) { return env.profiler->GetProfile(&c, get, &stored); });
  if (s.ok()) return stored;
  if (s.error_code() != grpc::StatusCode::NOT_FOUND) {
    return FromGrpc(s, absl::StrCat("profile \"", spec.workload, "\""));
  }
  return local.ResolveWorkload(spec.workload);
}

struct Catalog {
  std::map<std::string, double> spot_price;
  std::string ps_type = "m5.xlarge";
  double ps_price = 0;
};

Catalog PricesOf(const pb::InstanceCatalog& catalog) {
  Catalog c;
  for (const pb::InstanceType& t : catalog.instance_types()) {
    c.spot_price[t.name()] = t.spot_price_per_hour();
  }
  if (!catalog.parameter_server().instance_type().empty()) {
    c.ps_type = catalog.parameter_server().instance_type();
  }
  c.ps_price = catalog.parameter_server().spot_price_per_hour();
  return c;
}

// Per-type predicted iteration time and batch of a prediction.
std::map<std::string, const pb::WorkerPrediction*> ByType(const pb::Prediction& prediction) {
  std::map<std::string, const pb::WorkerPrediction*> out;
  for (const pb::WorkerPrediction& w : prediction.workers()) out[w.instance_type()] = &w;
  return out;
}

// One running job.
class Job {
 public:
  Job(JobRecord record, JobSpec spec, RunnerEnv& env)
      : job_(std::move(record)), spec_(std::move(spec)), env_(env) {}

  absl::StatusOr<JobRecord> Run();

 private:
  absl::Status Load();
  absl::Status Save() { return env_.store->UpdateJob(job_); }
  absl::Status Log(const std::string& kind, const std::string& detail) {
    return env_.store->AddEvent(job_.id, kind, detail);
  }
  absl::Status LaunchPlanned();
  // The plan's workers; a type the cloud has no capacity for is capped at what did start and the
  // rest of the plan re-planned around it, round after round ("capacity-replan" events, written
  // before their launches, so that a resumed gateway replays the same launches).
  absl::Status LaunchPlannedWorkers();
  // Asks the provisioner to re-plan the rest of the job: `survivors` (type -> count) stay,
  // `iterations_done` were trained on `before`, and each type of `capped` is held at its count
  // (its quota). `what` names the re-plan in errors.
  absl::StatusOr<pb::ReplanResponse> RequestReplan(const std::map<std::string, int>& survivors,
                                                   const pb::Cluster& before,
                                                   double iterations_done,
                                                   const std::map<std::string, int>& capped,
                                                   const std::string& what);
  // `counts` (type -> count) with the job's parameter servers.
  pb::Cluster ClusterOf(const std::map<std::string, int>& counts) const;
  // The workers of `type` on record that have not ended.
  int WorkersOf(const std::string& type) const;
  // Launches `count` workers of `type` with `token`, records and registers them.
  absl::StatusOr<std::vector<std::string>> LaunchWorkers(const std::string& type, int count,
                                                         int first_index, const std::string& token,
                                                         const pb::Prediction& prediction,
                                                         const std::string& reason);
  absl::Status Record(const Instance& instance, const std::string& reason, const std::string& token,
                      double iteration_s);
  absl::Status Register(const InstanceRecord& instance);
  void StartWatching();
  void StopWatching();
  absl::Status HandleEvent(const pb::RevocationEvent& event);
  absl::Status HandlePending();
  absl::Status Takeover(RevocationRecord& revocation);
  absl::Status PollProgress();
  absl::Status PollInstances();
  absl::Status Finish();
  absl::Status Fail(const std::string& why);
  void ShowProgress();

  JobRecord job_;
  JobSpec spec_;
  RunnerEnv& env_;
  pb::WorkloadProfile workload_;
  pb::InstanceCatalog catalog_;
  pb::Plan plan_;
  Catalog prices_;
  std::map<std::string, InstanceRecord> instances_;  // by id
  std::set<std::string> reported_workers_;
  double last_loss_ = 0;
  std::string last_warning_;

  std::mutex mu_;
  // Events from the watcher; an empty one (nullopt) says the detector's numbering restarted.
  std::deque<std::optional<pb::RevocationEvent>> events_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  std::mutex context_mu_;
  grpc::ClientContext* watch_context_ = nullptr;  // guarded by context_mu_
  std::thread watcher_;
};

absl::Status Job::Load() {
  auto workload = FromJson<pb::WorkloadProfile>(job_.workload_json, "workload profile");
  auto catalog = FromJson<pb::InstanceCatalog>(job_.catalog_json, "catalog");
  auto plan = FromJson<pb::Plan>(job_.plan_json, "plan");
  if (!workload.ok()) return workload.status();
  if (!catalog.ok()) return catalog.status();
  if (!plan.ok()) return plan.status();
  workload_ = *std::move(workload);
  catalog_ = *std::move(catalog);
  plan_ = *std::move(plan);
  prices_ = PricesOf(catalog_);
  auto instances = env_.store->Instances(job_.id);
  if (!instances.ok()) return instances.status();
  for (InstanceRecord& i : *instances) instances_[i.id] = std::move(i);
  return absl::OkStatus();
}

absl::Status Job::Record(const Instance& instance, const std::string& reason,
                         const std::string& token, double iteration_s) {
  if (instances_.count(instance.id) > 0) return absl::OkStatus();  // relaunch deduplicated
  InstanceRecord r{.job_id = job_.id,
                   .id = instance.id,
                   .role = std::string(launcher::RoleName(instance.role)),
                   .instance_type = instance.instance_type,
                   .index = instance.index,
                   .reason = reason,
                   .launch_token = token,
                   .price_per_hour = instance.role == Role::kParameterServer
                                         ? prices_.ps_price
                                         : prices_.spot_price[instance.instance_type],
                   .predicted_iteration_s = iteration_s,
                   .metadata_endpoint = instance.metadata_endpoint,
                   .launched_ms = NowMs()};
  if (auto s = env_.store->PutInstance(r); !s.ok()) return s;
  instances_[r.id] = r;
  return Register(r);
}

absl::Status Job::Register(const InstanceRecord& instance) {
  if (env_.detector == nullptr) return absl::OkStatus();
  pb::RegisterInstanceRequest request;
  pb::WatchedInstance* w = request.mutable_instance();
  w->set_instance_id(instance.id);
  w->set_job_id(job_.id);
  w->set_cloud(pb::CLOUD_AWS);
  w->set_metadata_endpoint(instance.metadata_endpoint);
  pb::RegisterInstanceResponse response;
  grpc::Status s = Call([&](grpc::ClientContext& c) {
    return env_.detector->RegisterInstance(&c, request, &response);
  });
  return FromGrpc(s, absl::StrCat("registering ", instance.id, " with the detector"));
}

absl::StatusOr<std::vector<std::string>> Job::LaunchWorkers(const std::string& type, int count,
                                                            int first_index,
                                                            const std::string& token,
                                                            const pb::Prediction& prediction,
                                                            const std::string& reason) {
  auto by_type = ByType(prediction);
  const pb::WorkerPrediction* predicted = by_type.count(type) > 0 ? by_type[type] : nullptr;
  LaunchRequest request{.job_id = job_.id,
                        .instance_type = type,
                        .count = count,
                        .role = Role::kWorker,
                        .first_index = first_index,
                        .command = spec_.worker_command,
                        .ps_addresses = absl::StrSplit(job_.ps_addresses, ',', absl::SkipEmpty()),
                        .batch_size = predicted != nullptr ? predicted->batch_size() : 0,
                        .client_token = token};
  const double iteration_s = predicted != nullptr ? predicted->iteration_time_s() : 0;
  request.extra_env = {{"SPOTDNN_PROFILER", env_.profiler_address},
                       {"SPOTDNN_DETECTOR", env_.detector_address},
                       {"SPOTDNN_PREDICTED_ITERATION_S", absl::StrFormat("%.6f", iteration_s)}};
  auto launched = env_.provider->Launch(request);
  if (!launched.ok()) return launched.status();
  std::vector<std::string> ids;
  for (const Instance& i : launched->instances) {
    if (auto s = Record(i, reason, token, iteration_s); !s.ok()) return s;
    ids.push_back(i.id);
  }
  if (!launched->error.ok()) return launched->error;
  return ids;
}

absl::Status Job::LaunchPlanned() {
  if (job_.started_ms == 0) {
    job_.started_ms = NowMs();
    if (auto s = Save(); !s.ok()) return s;
  }
  // Parameter servers first: the workers need their addresses.
  LaunchRequest ps{.job_id = job_.id,
                   .instance_type = prices_.ps_type,
                   .count = spec_.parameter_servers,
                   .role = Role::kParameterServer,
                   .command = spec_.ps_command,
                   .client_token = launcher::ClientTokenFor(job_.id + "-ps")};
  std::vector<std::string> ports = absl::StrSplit(job_.ps_ports, ',', absl::SkipEmpty());
  for (const std::string& port : ports) ps.ps_addresses.push_back("127.0.0.1:" + port);
  ps.extra_env = {{"SPOTDNN_PS_PORT", "2222"}, {"SPOTDNN_DETECTOR", env_.detector_address}};
  auto launched = env_.provider->Launch(ps);
  if (!launched.ok()) return launched.status();
  if (!launched->error.ok()) return launched->error;
  std::vector<std::string> addresses;
  for (size_t i = 0; i < launched->instances.size(); ++i) {
    const Instance& instance = launched->instances[i];
    if (auto s = Record(instance, "plan", ps.client_token, 0); !s.ok()) return s;
    addresses.push_back(instance.private_address == "127.0.0.1" && i < ports.size()
                            ? "127.0.0.1:" + ports[i]
                            : instance.private_address + ":2222");
  }
  job_.ps_addresses = absl::StrJoin(addresses, ",");
  if (absl::Status s = LaunchPlannedWorkers(); !s.ok()) return s;
  const int index = WorkersOf("");
  job_.state = "running";
  if (auto s = Save(); !s.ok()) return s;
  (void)Log("launched", absl::StrCat(instances_.size(), " instances"));
  Emit(env_, "launched",
       absl::StrCat("Launched ", instances_.size(), " instances (", spec_.parameter_servers,
                    " parameter server(s) and ", index, " workers) on ", env_.provider->name()),
       JsonObject().Integer("instances", instances_.size()).Integer("workers", index));
  return absl::OkStatus();
}

int Job::WorkersOf(const std::string& type) const {
  int n = 0;
  for (const auto& [id, i] : instances_) {
    n += i.role == "worker" && i.state != "ended" && (type.empty() || i.instance_type == type);
  }
  return n;
}

pb::Cluster Job::ClusterOf(const std::map<std::string, int>& counts) const {
  pb::Cluster cluster;
  for (const auto& [type, n] : counts) {
    pb::InstanceCount* c = cluster.add_instances();
    c->set_instance_type(type);
    c->set_count(n);
  }
  cluster.set_parameter_servers(spec_.parameter_servers);
  return cluster;
}

absl::StatusOr<pb::ReplanResponse> Job::RequestReplan(const std::map<std::string, int>& survivors,
                                                      const pb::Cluster& before,
                                                      double iterations_done,
                                                      const std::map<std::string, int>& capped,
                                                      const std::string& what) {
  pb::ReplanRequest request;
  *request.mutable_workload()->mutable_profile() = workload_;
  *request.mutable_catalog()->mutable_catalog() = catalog_;
  *request.mutable_slo() = SloOf(spec_);
  *request.mutable_options() = OptionsOf(spec_);
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
  pb::ReplanResponse replan;
  grpc::Status s =
      Call([&](grpc::ClientContext& c) { return env_.provisioner->Replan(&c, request, &replan); });
  if (auto st = FromGrpc(s, what); !st.ok()) return st;
  return replan;
}

absl::Status Job::LaunchPlannedWorkers() {
  struct Round {
    std::vector<std::pair<std::string, int>> launch;  // (type, count) in launch order
    int first_index = 0;
    std::string token_prefix;
    pb::Prediction prediction;
    std::set<std::string> exhausted;  // types the cloud had no capacity for in this round
  };
  auto round_of = [this](const pb::Cluster& cluster, int first_index, int number,
                         const pb::Prediction& prediction) {
    Round round{.first_index = first_index,
                .token_prefix = number == 0 ? absl::StrCat(job_.id, "-w-")
                                            : absl::StrCat(job_.id, "-capacity-", number, "-"),
                .prediction = prediction};
    for (const pb::InstanceCount& c : cluster.instances()) {
      if (c.count() > 0) round.launch.emplace_back(c.instance_type(), c.count());
    }
    return round;
  };
  auto adopt = [this](const pb::ReplanResponse& replan) {
    // The job's plan is now the re-planned whole cluster, from iteration 0. The stored plan stays
    // the first one: a resumed gateway starts from it and replays the re-plans.
    plan_ = replan.plan();
    job_.target_iterations = plan_.prediction().normalized_iterations();
    job_.predicted_time_s = replan.plan().time_s();
    job_.predicted_cost_usd = replan.plan().cost_usd();
  };
  std::vector<Round> rounds = {round_of(plan_.cluster(), 0, 0, plan_.prediction())};
  std::map<std::string, int> capped;  // type -> the count it is held at

  // A resumed gateway: the re-plans made before it was stopped, in order.
  auto events = env_.store->Events(job_.id);
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
    auto replan = FromJson<pb::ReplanResponse>(doc["replan"].dump(), "capacity re-plan");
    if (!replan.ok()) return replan.status();
    for (const auto& [type, n] : doc["exhausted"].items()) {
      rounds.back().exhausted.insert(type);
      capped[type] = n.is_number_integer() ? n.get<int>() : 0;
    }
    rounds.push_back(round_of(replan->plan().to_launch(), doc["first_index"].get<int>(),
                              static_cast<int>(rounds.size()), replan->plan().prediction()));
    adopt(*replan);
  }

  for (size_t r = 0; r < rounds.size(); ++r) {
    int index = rounds[r].first_index;
    std::map<std::string, int> exhausted;  // type -> workers of it running after this round
    std::vector<std::string> why;
    for (const auto& [type, count] : rounds[r].launch) {
      const int first = index;
      index += count;
      // Replayed: the cloud had no capacity for it then; what did start is on record.
      if (rounds[r].exhausted.count(type) > 0) continue;
      auto ids =
          LaunchWorkers(type, count, first, launcher::ClientTokenFor(rounds[r].token_prefix + type),
                        rounds[r].prediction, r == 0 ? "plan" : "capacity");
      if (ids.ok()) continue;
      if (!absl::IsResourceExhausted(ids.status())) return ids.status();
      exhausted[type] = WorkersOf(type);
      why.emplace_back(ids.status().message());
    }
    job_.next_worker_index = std::max(job_.next_worker_index, index);
    if (exhausted.empty() || r + 1 < rounds.size()) continue;

    std::vector<std::string> types;
    for (const auto& [type, n] : exhausted) {
      capped[type] = n;
      types.push_back(absl::StrCat(type, " (", n, " running)"));
    }
    (void)Log("warning", absl::StrJoin(why, "; "));
    Emit(env_, "capacity",
         absl::StrCat("No capacity for ", absl::StrJoin(types, ", "), ": re-planning without more"),
         JsonObject().String("types", absl::StrJoin(types, ", ")));
    if (rounds.size() > static_cast<size_t>(catalog_.instance_types_size()) + 1) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no capacity for ", absl::StrJoin(types, ", "), " after ", rounds.size(),
                       " re-plans: ", absl::StrJoin(why, "; ")));
    }
    // Nothing trained yet: the job starts from the plan's cluster at iteration 0, with the
    // workers running now.
    std::map<std::string, int> running;
    for (const auto& [id, i] : instances_) {
      if (i.role == "worker" && i.state != "ended") ++running[i.instance_type];
    }
    auto replan = RequestReplan(running, plan_.cluster(), 0, capped,
                                "re-planning around a type with no capacity");
    if (!replan.ok()) return replan.status();
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
                                   {"replan", nlohmann::json::parse(ToJson(*replan))}};
    if (auto st = Log("capacity-replan", record.dump()); !st.ok()) return st;
    adopt(*replan);
    if (auto st = Save(); !st.ok()) return st;
    rounds[r].exhausted.clear();
    for (const auto& [type, n] : exhausted) rounds[r].exhausted.insert(type);
    rounds.push_back(round_of(replan->plan().to_launch(), index, static_cast<int>(rounds.size()),
                              replan->plan().prediction()));
    std::vector<std::string> launch;
    for (const auto& [type, n] : rounds.back().launch) launch.push_back(absl::StrCat(type, "=", n));
    Emit(env_, "replanned",
         absl::StrFormat("Re-planned without more %s: launch %s; predicted %.1f s and $%.4f",
                         absl::StrJoin(types, ", "),
                         launch.empty() ? "nothing" : absl::StrJoin(launch, ","),
                         replan->plan().time_s(), replan->plan().cost_usd()),
         JsonObject()
             .String("reason", "capacity")
             .Bool("feasible", true)
             .String("to_launch", absl::StrJoin(launch, ","))
             .Number("predicted_time_s", replan->plan().time_s()));
  }
  return absl::OkStatus();
}

void Job::StartWatching() {
  if (env_.detector == nullptr) return;
  watcher_ = std::thread([this] {
    uint64_t after = static_cast<uint64_t>(job_.last_event_seq);
    while (!stop_.load()) {
      grpc::ClientContext context;
      {
        std::lock_guard<std::mutex> lock(context_mu_);
        if (stop_.load()) return;
        watch_context_ = &context;
      }
      pb::WatchEventsRequest request;
      request.set_job_id(job_.id);
      request.set_after_sequence(after);
      auto reader = env_.detector->WatchEvents(&context, request);
      pb::RevocationEvent event;
      while (reader->Read(&event)) {
        after = std::max<uint64_t>(after, event.sequence());
        std::lock_guard<std::mutex> lock(mu_);
        events_.push_back(event);
      }
      const grpc::Status finished = reader->Finish();
      if (finished.error_code() == grpc::StatusCode::OUT_OF_RANGE && after > 0) {
        // The detector has no event as new as ours: its log was reset (a fresh database) or this
        // is another replica's log. Read it from the start; old notices for instances that are no
        // longer running change nothing.
        after = 0;
        std::lock_guard<std::mutex> lock(mu_);
        events_.push_back(std::nullopt);
      }
      {
        std::lock_guard<std::mutex> lock(context_mu_);
        watch_context_ = nullptr;
      }
      if (!stop_.load()) absl::SleepFor(absl::Milliseconds(200));  // the stream broke: resume
    }
  });
}

void Job::StopWatching() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(context_mu_);
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  if (watcher_.joinable()) watcher_.join();
}

absl::Status Job::HandleEvent(const pb::RevocationEvent& event) {
  if (static_cast<int64_t>(event.sequence()) <= job_.last_event_seq) return absl::OkStatus();
  job_.last_event_seq = static_cast<int64_t>(event.sequence());
  // A kind this gateway does not know (a newer detector) is logged by number ("unknown-7").
  const std::string kind = services::EnumLabel(event.kind());
  (void)Log(kind, absl::StrCat(event.instance_id(), " ", event.action(), " ", event.detail()));
  auto it = instances_.find(event.instance_id());
  if (it == instances_.end()) return Save();
  InstanceRecord& instance = it->second;
  const bool goes = event.kind() == pb::RevocationEvent::KIND_NOTICE ||
                    event.kind() == pb::RevocationEvent::KIND_REVOKED ||
                    event.kind() == pb::RevocationEvent::KIND_LOST;
  if (goes && instance.role == "worker" && instance.state == "running") {
    instance.state = event.kind() == pb::RevocationEvent::KIND_NOTICE ? "revoking" : "ended";
    if (instance.state == "ended") instance.ended_ms = NowMs();
    if (auto s = env_.store->PutInstance(instance); !s.ok()) return s;
    RevocationRecord r{.job_id = job_.id,
                       .instance_id = instance.id,
                       .kind = kind,
                       .cloud_notice_ms = event.notice_unix_ms(),
                       .effective_ms = event.effective_unix_ms(),
                       .received_ms = NowMs()};
    if (auto s = env_.store->PutRevocation(r); !s.ok()) return s;
    Emit(env_, "notice",
         absl::StrCat("Revocation ", kind, " for ", instance.id, " (", instance.instance_type,
                      event.effective_unix_ms() > 0
                          ? absl::StrFormat(", goes in %.1f s",
                                            (event.effective_unix_ms() - NowMs()) / 1000.0)
                          : "",
                      "): re-planning"),
         JsonObject()
             .String("instance", instance.id)
             .String("kind", kind)
             .Integer("effective_unix_ms", event.effective_unix_ms()));
  } else if (goes && instance.role == "ps") {
    (void)Log("warning", absl::StrCat("parameter server ", instance.id, " got a ", kind,
                                      ": parameter-server takeover is not automated"));
    Emit(env_, "warning",
         absl::StrCat("Parameter server ", instance.id, " got a ", kind,
                      " notice; parameter servers are not replaced automatically"),
         JsonObject().String("instance", instance.id));
  }
  return Save();
}

absl::Status Job::Takeover(RevocationRecord& revocation) {
  pb::ReplanResponse replan;
  if (!revocation.replan_json.empty()) {
    auto stored = FromJson<pb::ReplanResponse>(revocation.replan_json, "re-plan");
    if (!stored.ok()) return stored.status();
    replan = *std::move(stored);
  } else {
    std::map<std::string, int> survivors, before;
    for (const auto& [id, i] : instances_) {
      if (i.role != "worker") continue;
      if (i.state == "running") ++survivors[i.instance_type];
      if (i.state != "ended" || id == revocation.instance_id) ++before[i.instance_type];
    }
    auto replanned =
        RequestReplan(survivors, ClusterOf(before), job_.iterations_done, {}, "re-planning");
    if (!replanned.ok()) return replanned.status();
    replan = *std::move(replanned);
    if (!replan.plan().feasible()) {
      // No plan meets the deadline any more: replace like for like and finish as early as can be.
      const std::string reason = replan.plan().reason();
      replan.mutable_plan()->mutable_to_launch()->Clear();
      pb::InstanceCount* c = replan.mutable_plan()->mutable_to_launch()->add_instances();
      c->set_instance_type(instances_[revocation.instance_id].instance_type);
      c->set_count(1);
      revocation.detail =
          absl::StrCat("no plan meets the SLO any more (", reason, "); replaced like for like");
    }
    if (replan.plan().feasible()) {
      // The rest of the job, on the new cluster, from the progress so far: under the model the
      // iterations still needed depend on the cluster that does them.
      job_.target_iterations =
          job_.iterations_done + replan.plan().prediction().normalized_iterations();
    }
    revocation.replanned_ms = NowMs();
    revocation.replan_json = ToJson(replan);
    revocation.takeover_token = absl::StrCat(job_.id, "-takeover-", ++job_.takeovers);
    revocation.takeover_first_index = job_.next_worker_index;
    for (const pb::InstanceCount& c : replan.plan().to_launch().instances()) {
      job_.next_worker_index += c.count();
    }
    // Written before launching: a resumed gateway re-issues the same launches.
    if (auto st = Save(); !st.ok()) return st;
    if (auto st = env_.store->PutRevocation(revocation); !st.ok()) return st;
    std::vector<std::string> launch;
    for (const pb::InstanceCount& c : replan.plan().to_launch().instances()) {
      launch.push_back(absl::StrCat(c.instance_type(), "=", c.count()));
    }
    Emit(env_, "replanned",
         absl::StrCat(
             "Re-planned in ", revocation.replanned_ms - revocation.received_ms, " ms: launch ",
             launch.empty() ? "nothing" : absl::StrJoin(launch, ","),
             replan.plan().feasible()
                 ? absl::StrFormat(", %s more iterations in a predicted %.1f s",
                                   Fixed(replan.plan().prediction().normalized_iterations(), 0),
                                   replan.plan().time_s())
                 : " (" + revocation.detail + ")"),
         JsonObject()
             .String("instance", revocation.instance_id)
             .Bool("feasible", replan.plan().feasible())
             .Number("remaining_time_s", replan.remaining_time_s())
             .String("to_launch", absl::StrJoin(launch, ",")));
  }
  std::vector<std::string> ids;
  int index = revocation.takeover_first_index;
  for (const pb::InstanceCount& c : replan.plan().to_launch().instances()) {
    if (c.count() == 0) continue;
    auto launched = LaunchWorkers(
        c.instance_type(), c.count(), index,
        launcher::ClientTokenFor(absl::StrCat(revocation.takeover_token, "-", c.instance_type())),
        replan.plan().prediction(), "takeover");
    if (!launched.ok()) return launched.status();
    ids.insert(ids.end(), launched->begin(), launched->end());
    index += c.count();
  }
  revocation.takeover_ids = absl::StrJoin(ids, ",");
  revocation.takeover_launched_ms = NowMs();
  revocation.status = ids.empty() ? "none-needed" : "launched";
  if (auto st = env_.store->PutRevocation(revocation); !st.ok()) return st;
  (void)Log("takeover", absl::StrCat(revocation.instance_id, " -> ", revocation.takeover_ids));
  const int64_t since =
      revocation.takeover_launched_ms -
      (revocation.cloud_notice_ms > 0 ? revocation.cloud_notice_ms : revocation.received_ms);
  Emit(env_, "takeover",
       ids.empty() ? absl::StrCat("No takeover needed for ", revocation.instance_id)
                   : absl::StrCat("Takeover ", revocation.takeover_ids, " running for ",
                                  revocation.instance_id, ", ", since, " ms after the notice"),
       JsonObject()
           .String("instance", revocation.instance_id)
           .String("takeover", revocation.takeover_ids)
           .Integer("notice_to_takeover_ms", since));
  return absl::OkStatus();
}

absl::Status Job::HandlePending() {
  auto revocations = env_.store->Revocations(job_.id);
  if (!revocations.ok()) return revocations.status();
  for (RevocationRecord& r : *revocations) {
    if (r.status != "pending") continue;
    if (absl::Status s = Takeover(r); !s.ok()) {
      r.status = "failed";
      r.detail = std::string(s.message());
      (void)env_.store->PutRevocation(r);
      (void)Log("error", absl::StrCat("takeover for ", r.instance_id, " failed: ", s.message()));
      Emit(
          env_, "error", absl::StrCat("Takeover for ", r.instance_id, " failed: ", s.message()),
          JsonObject().String("instance", r.instance_id).String("error", std::string(s.message())));
    }
  }
  return absl::OkStatus();
}

absl::Status Job::PollProgress() {
  pb::GetJobProgressRequest request;
  request.set_job_id(job_.id);
  pb::GetJobProgressResponse progress;
  grpc::Status s = Call(
      [&](grpc::ClientContext& c) { return env_.profiler->GetJobProgress(&c, request, &progress); },
      absl::Seconds(10));
  if (!s.ok()) return FromGrpc(s, "reading progress from the profiler");
  job_.iterations_done = static_cast<double>(progress.total_steps());
  for (const pb::WorkerProgress& w : progress.workers()) {
    if (w.last_loss() > 0) last_loss_ = w.last_loss();
    if (!reported_workers_.insert(w.worker_id()).second) continue;
    auto it = instances_.find(w.worker_id());
    if (it == instances_.end() || it->second.reason != "takeover") continue;
    // The first report of a takeover worker: it is training.
    auto revocations = env_.store->Revocations(job_.id);
    if (!revocations.ok()) return revocations.status();
    for (RevocationRecord& r : *revocations) {
      std::vector<std::string> ids = absl::StrSplit(r.takeover_ids, ',', absl::SkipEmpty());
      if (r.takeover_reported_ms == 0 && std::count(ids.begin(), ids.end(), w.worker_id()) > 0) {
        r.takeover_reported_ms = NowMs();
        if (auto st = env_.store->PutRevocation(r); !st.ok()) return st;
      }
    }
  }
  return Save();
}

absl::Status Job::PollInstances() {
  auto described = env_.provider->Describe(job_.id);
  if (!described.ok()) return described.status();
  std::map<std::string, const Instance*> seen;
  for (const Instance& i : *described) seen[i.id] = &i;
  for (auto& [id, r] : instances_) {
    if (r.state == "ended") continue;
    auto it = seen.find(id);
    const bool gone = it == seen.end() ||
                      it->second->state == launcher::InstanceState::kTerminated ||
                      it->second->state == launcher::InstanceState::kShuttingDown;
    if (!gone) continue;
    r.state = "ended";
    r.ended_ms = it != seen.end() && it->second->end_time != absl::InfiniteFuture()
                     ? absl::ToUnixMillis(it->second->end_time)
                     : NowMs();
    if (auto s = env_.store->PutInstance(r); !s.ok()) return s;
    auto revocations = env_.store->Revocations(job_.id);
    if (!revocations.ok()) return revocations.status();
    for (RevocationRecord& rev : *revocations) {
      if (rev.instance_id == id && rev.ended_ms == 0) {
        rev.ended_ms = r.ended_ms;
        if (auto s = env_.store->PutRevocation(rev); !s.ok()) return s;
      }
    }
    (void)Log("ended", id);
    Emit(env_, "ended", absl::StrCat("Instance ", id, " (", r.instance_type, ") stopped"),
         JsonObject().String("instance", id));
  }
  return absl::OkStatus();
}

void Job::ShowProgress() {
  int running = 0, revoking = 0;
  for (const auto& [id, i] : instances_) {
    if (i.role != "worker") continue;
    running += i.state == "running";
    revoking += i.state == "revoking";
  }
  const double elapsed = (NowMs() - job_.started_ms) / 1000.0;
  const double fraction =
      job_.target_iterations > 0 ? job_.iterations_done / job_.target_iterations : 0;
  Emit(env_, "progress",
       absl::StrFormat("[%6.1fs] %s/%s iterations (%.1f%%)%s, %d workers running%s%s", elapsed,
                       Fixed(job_.iterations_done, 0), Fixed(job_.target_iterations, 0),
                       100 * std::min(1.0, fraction),
                       last_loss_ > 0 ? absl::StrFormat(", loss %.4g", last_loss_) : "", running,
                       revoking > 0 ? absl::StrCat(", ", revoking, " revoking") : "",
                       spec_.deadline_s > 0
                           ? absl::StrFormat(", deadline in %.0f s", spec_.deadline_s - elapsed)
                           : ""),
       JsonObject()
           .Number("elapsed_s", elapsed)
           .Number("iterations_done", job_.iterations_done)
           .Number("target_iterations", job_.target_iterations)
           .Number("loss", last_loss_)
           .Integer("workers_running", running)
           .Integer("workers_revoking", revoking));
}

absl::Status Job::Finish() {
  // Every instance, stopped ones too, so that the provider forgets them (NOT_FOUND: it has).
  std::vector<std::string> ids;
  for (const auto& [id, i] : instances_) ids.push_back(id);
  absl::Status terminated = env_.provider->Terminate(ids);
  if (!terminated.ok() && !absl::IsNotFound(terminated)) return terminated;
  const int64_t now = NowMs();
  for (auto& [id, i] : instances_) {
    if (i.state != "ended") {
      i.state = "ended";
      i.ended_ms = now;
      if (auto s = env_.store->PutInstance(i); !s.ok()) return s;
    }
    if (env_.detector != nullptr) {
      pb::UnregisterInstanceRequest request;
      request.set_instance_id(id);
      pb::UnregisterInstanceResponse response;
      (void)Call([&](grpc::ClientContext& c) {
        return env_.detector->UnregisterInstance(&c, request, &response);
      });
    }
  }
  auto revocations = env_.store->Revocations(job_.id);
  if (!revocations.ok()) return revocations.status();
  for (RevocationRecord& r : *revocations) {
    if (r.ended_ms == 0 && instances_.count(r.instance_id) > 0) {
      r.ended_ms = instances_[r.instance_id].ended_ms;
      if (auto s = env_.store->PutRevocation(r); !s.ok()) return s;
    }
  }
  job_.state = job_.state == "failed" ? "failed" : "finished";
  job_.finished_ms = now;
  if (auto s = Save(); !s.ok()) return s;
  auto summary = JobSummaryJson(*env_.store, job_.id);
  if (!summary.ok()) return summary.status();
  job_.summary_json = *summary;
  if (auto s = Save(); !s.ok()) return s;
  (void)Log(job_.state, job_.message);
  return absl::OkStatus();
}

absl::Status Job::Fail(const std::string& why) {
  job_.state = "failed";
  job_.message = why;
  Emit(env_, "failed", absl::StrCat("Job failed: ", why), JsonObject().String("error", why));
  return Finish();
}

absl::StatusOr<JobRecord> Job::Run() {
  if (auto s = Load(); !s.ok()) return s;
  if (job_.state == "launching") {
    if (absl::Status s = LaunchPlanned(); !s.ok()) {
      if (absl::Status f = Fail(absl::StrCat("launch failed: ", s.message())); !f.ok()) return f;
      return job_;
    }
  } else {
    // Resumed: the instances run on; make sure the detector watches them. Not those already
    // going (a revocation is under way): registering a revoked instance again starts a new
    // lifetime for it in the detector, which would report its notice again.
    for (const auto& [id, i] : instances_) {
      if (i.state == "running") (void)Register(i);
    }
    (void)Log("resumed", "");
    Emit(env_, "resumed",
         absl::StrCat("Resumed job ", job_.id, " with ", instances_.size(), " instances on record"),
         JsonObject().Integer("instances", instances_.size()));
  }
  StartWatching();
  absl::Time next_progress = absl::Now();
  absl::Time next_describe = absl::Now();
  absl::Time last_advance = absl::Now();
  double last_iterations = job_.iterations_done;
  const std::string logs = env_.instance_logs.empty()
                               ? ""
                               : absl::StrCat("; the instances' output is in ", env_.instance_logs);
  absl::Status status;
  while (status.ok()) {
    std::deque<std::optional<pb::RevocationEvent>> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events.swap(events_);
    }
    for (const std::optional<pb::RevocationEvent>& e : events) {
      if (!status.ok()) break;
      if (e.has_value()) {
        status = HandleEvent(*e);
        continue;
      }
      // The detector lost its event log, and maybe its registrations: number afresh, and make
      // sure it watches the running instances.
      (void)Log("warning",
                absl::StrCat("the detector's event log restarted (after sequence ",
                             job_.last_event_seq, "); re-registered the running instances"));
      job_.last_event_seq = 0;
      for (const auto& [id, i] : instances_) {
        if (i.state == "running") (void)Register(i);
      }
      status = Save();
    }
    if (status.ok()) status = HandlePending();
    if (absl::Now() >= next_describe) {
      if (status.ok()) status = PollInstances();
      next_describe = absl::Now() + absl::Seconds(1);
    }
    if (absl::Status p = PollProgress(); !p.ok()) {
      // The profiler may be restarting: say so once, not on every tick.
      if (p.message() != last_warning_) (void)Log("warning", std::string(p.message()));
      last_warning_ = std::string(p.message());
    } else {
      last_warning_.clear();
    }
    if (absl::Now() >= next_progress) {
      ShowProgress();
      next_progress = absl::Now() + env_.progress_every;
    }
    if (!status.ok()) break;
    if (job_.target_iterations > 0 && job_.iterations_done >= job_.target_iterations) {
      ShowProgress();
      status = Finish();
      break;
    }
    if (job_.iterations_done > last_iterations) {
      last_iterations = job_.iterations_done;
      last_advance = absl::Now();
    } else if (env_.stall_timeout > absl::ZeroDuration() &&
               absl::Now() - last_advance > env_.stall_timeout) {
      status = Fail(absl::StrCat(
          "no worker reported a new iteration for ", absl::FormatDuration(env_.stall_timeout), " (",
          Fixed(job_.iterations_done, 0), " of ", Fixed(job_.target_iterations, 0),
          " done): do the workers report their steps to the profiler ($SPOTDNN_PROFILER)?", logs));
      break;
    }
    bool any_worker = false;
    for (const auto& [id, i] : instances_) any_worker |= i.role == "worker" && i.state != "ended";
    auto revocations = env_.store->Revocations(job_.id);
    bool pending = false;
    if (revocations.ok()) {
      for (const RevocationRecord& r : *revocations) pending |= r.status == "pending";
    }
    if (!any_worker && !pending) {
      status =
          Fail(absl::StrCat("no worker is left running and no takeover is pending (worker "
                            "command: ",
                            spec_.worker_command, ")", logs));
      break;
    }
    absl::SleepFor(env_.tick);
  }
  StopWatching();
  if (!status.ok()) return status;
  Emit(env_, job_.state,
       absl::StrCat("Job ", job_.id, " ", job_.state,
                    job_.message.empty() ? "" : absl::StrCat(": ", job_.message)),
       JsonObject().Raw("summary", job_.summary_json.empty() ? "{}" : job_.summary_json));
  return job_;
}

absl::StatusOr<int> FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return absl::InternalError("cannot find a free local port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

absl::StatusOr<JobRecord> PlanJob(const std::string& spec_json, RunnerEnv& env,
                                  const services::DataRegistry& local) {
  auto spec = ParseJobSpec(spec_json);
  if (!spec.ok()) return spec.status();
  if (env.store->GetJob(spec->name).ok()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "job \"", spec->name, "\" already exists: resume it with `spotdnn run --resume ",
        spec->name, "` or give the job another name"));
  }
  auto workload = ResolveWorkload(*spec, env, local);
  if (!workload.ok()) return workload.status();
  auto catalog = local.ResolveCatalog(spec->catalog);
  if (!catalog.ok()) return catalog.status();
  pb::PlanRequest request;
  *request.mutable_workload()->mutable_profile() = *workload;
  *request.mutable_catalog()->mutable_catalog() = *catalog;
  *request.mutable_slo() = SloOf(*spec);
  request.set_mode(spec->deadline_s > 0 ? pb::PLAN_MODE_DEADLINE : pb::PLAN_MODE_BUDGET);
  *request.mutable_options() = OptionsOf(*spec);
  pb::PlanResponse response;
  grpc::Status s =
      Call([&](grpc::ClientContext& c) { return env.provisioner->Plan(&c, request, &response); });
  if (auto st = FromGrpc(s, "planning"); !st.ok()) return st;
  const pb::Plan& plan = response.plan();
  if (!plan.feasible()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("no plan meets the SLO: %s (the fastest takes %.0f s at $%.2f)",
                        plan.reason(), response.fastest_time_s(), response.fastest_cost_usd()));
  }
  JobRecord job{.id = spec->name,
                .spec_json = spec_json,
                .state = "launching",
                .created_ms = NowMs(),
                .workload_json = ToJson(*workload),
                .catalog_json = ToJson(*catalog),
                .plan_json = ToJson(plan),
                .target_iterations = plan.prediction().normalized_iterations(),
                .predicted_time_s = plan.time_s(),
                .predicted_cost_usd = plan.cost_usd()};
  if (env.provider->name() == "local") {
    std::vector<std::string> ports;
    for (int i = 0; i < spec->parameter_servers; ++i) {
      auto port = FreePort();
      if (!port.ok()) return port.status();
      ports.push_back(absl::StrCat(*port));
    }
    job.ps_ports = absl::StrJoin(ports, ",");
  }
  if (auto st = env.store->CreateJob(job); !st.ok()) return st;
  std::vector<std::string> cluster;
  for (const pb::InstanceCount& c : plan.cluster().instances()) {
    if (c.count() > 0) cluster.push_back(absl::StrCat(c.instance_type(), "=", c.count()));
  }
  (void)env.store->AddEvent(job.id, "planned", absl::StrJoin(cluster, ","));
  Emit(env, "planned",
       absl::StrFormat("Plan for %s: %s, %s iterations, predicted %.1f s and $%.4f (%s)", job.id,
                       absl::StrJoin(cluster, ","), Fixed(job.target_iterations, 0), plan.time_s(),
                       plan.cost_usd(), services::EnumLabel(plan.strategy())),
       JsonObject()
           .String("job_id", job.id)
           .String("cluster", absl::StrJoin(cluster, ","))
           .Number("target_iterations", job.target_iterations)
           .Number("predicted_time_s", plan.time_s())
           .Number("predicted_cost_usd", plan.cost_usd()));
  return job;
}

absl::StatusOr<JobRecord> RunJob(const std::string& job_id, RunnerEnv& env) {
  auto record = env.store->GetJob(job_id);
  if (!record.ok()) return record.status();
  if (record->state == "finished" || record->state == "failed") return record;
  auto spec = ParseJobSpec(record->spec_json);
  if (!spec.ok()) return spec.status();
  Job job(*std::move(record), *std::move(spec), env);
  return job.Run();
}

absl::StatusOr<std::string> JobSummaryJson(JobStore& store, const std::string& job_id) {
  auto job = store.GetJob(job_id);
  if (!job.ok()) return job.status();
  auto spec = ParseJobSpec(job->spec_json);
  if (!spec.ok()) return spec.status();
  auto instances = store.Instances(job_id);
  if (!instances.ok()) return instances.status();
  auto revocations = store.Revocations(job_id);
  if (!revocations.ok()) return revocations.status();
  const int64_t end = job->finished_ms > 0 ? job->finished_ms : NowMs();
  double cost = 0;
  int launched = 0, takeovers = 0;
  for (const InstanceRecord& i : *instances) {
    const int64_t stop = i.ended_ms > 0 ? i.ended_ms : end;
    cost += i.price_per_hour * std::max<int64_t>(0, stop - i.launched_ms) / 3.6e6;
    ++launched;
    takeovers += i.reason == "takeover";
  }
  const double actual_s = job->started_ms > 0 ? (end - job->started_ms) / 1000.0 : 0;
  std::string list;
  int handled = 0;
  for (const RevocationRecord& r : *revocations) {
    const bool done = r.status == "launched" || r.status == "none-needed";
    handled += done;
    const int64_t from = r.cloud_notice_ms > 0 ? r.cloud_notice_ms : r.received_ms;
    JsonObject o;
    o.String("instance", r.instance_id)
        .String("status", r.status)
        .String("takeover", r.takeover_ids)
        .Integer("notice_unix_ms", from)
        .Integer("received_unix_ms", r.received_ms)
        .Integer("replanned_unix_ms", r.replanned_ms)
        .Integer("takeover_running_unix_ms", r.takeover_launched_ms)
        .Integer("takeover_first_report_unix_ms", r.takeover_reported_ms)
        .Integer("revoked_instance_ended_unix_ms", r.ended_ms);
    if (r.takeover_launched_ms > 0) {
      o.Number("notice_to_takeover_running_s", (r.takeover_launched_ms - from) / 1000.0);
    }
    if (r.takeover_reported_ms > 0) {
      o.Number("notice_to_takeover_training_s", (r.takeover_reported_ms - from) / 1000.0);
    }
    if (r.takeover_launched_ms > 0 && r.ended_ms > 0) {
      o.Bool("takeover_before_revoked_ended", r.takeover_launched_ms < r.ended_ms);
    }
    if (!r.detail.empty()) o.String("detail", r.detail);
    absl::StrAppend(&list, list.empty() ? "" : ",", o.str());
  }
  const bool reached = job->target_iterations > 0 && job->iterations_done >= job->target_iterations;
  const bool in_time = spec->deadline_s == 0 || actual_s <= spec->deadline_s;
  const bool in_budget = spec->budget_usd == 0 || cost <= spec->budget_usd;
  return JsonObject()
      .String("job_id", job->id)
      .String("state", job->state)
      .Number("target_loss", spec->target_loss)
      .Number("deadline_s", spec->deadline_s)
      .Number("budget_usd", spec->budget_usd)
      .Number("target_iterations", job->target_iterations)
      .Number("iterations_done", job->iterations_done)
      .Number("predicted_time_s", job->predicted_time_s)
      .Number("actual_time_s", actual_s)
      .Number("predicted_cost_usd", job->predicted_cost_usd)
      .Number("actual_cost_usd", cost)
      .Integer("instances_launched", launched)
      .Integer("takeover_instances", takeovers)
      .Integer("revocations", static_cast<long long>(revocations->size()))
      .Integer("revocations_handled", handled)
      .Raw("revocation_list", "[" + list + "]")
      .Bool("loss_reached", reached)
      .Bool("deadline_met", in_time)
      .Bool("budget_met", in_budget)
      .Bool("slo_met", reached && in_time && in_budget)
      .str();
}

}  // namespace spotdnn::gateway
