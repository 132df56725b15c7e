#include "services/gateway/job/job_run.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "services/gateway/job/stop_rules.h"
#include "services/gateway/job/sync_launch.h"

namespace spotdnn::job {

absl::Status JobRun::Load() {
  if (auto s = FromStoredJson(job_.workload_json, "workload profile", &workload_); !s.ok()) {
    return s;
  }
  if (auto s = FromStoredJson(job_.catalog_json, "catalog", &catalog_); !s.ok()) return s;
  if (auto s = FromStoredJson(job_.plan_json, "plan", &plan_); !s.ok()) return s;
  first_plan_iterations_ = plan_.prediction().normalized_iterations();
  for (const pb::InstanceType& t : catalog_.instance_types()) {
    spot_price_[t.name()] = t.spot_price_per_hour();
    on_demand_price_[t.name()] = t.on_demand_price_per_hour();
  }
  if (!catalog_.parameter_server().instance_type().empty()) {
    ps_type_ = catalog_.parameter_server().instance_type();
  }
  ps_price_ = catalog_.parameter_server().spot_price_per_hour();
  auto sync = ResolveSync(spec_, workload_.sync());
  if (!sync.ok()) return sync.status();
  sync_ = *sync == pb::SYNC_KIND_ALLREDUCE;
  if (sync_) {
    spec_.parameter_servers = 0;  // none: the plans and re-plans of an all-reduce cluster
    if (auto s = LoadRestarts(); !s.ok()) return s;
  }
  auto instances = services_.store->Instances(job_.id);
  if (!instances.ok()) return instances.status();
  for (InstanceRecord& i : *instances) instances_[i.id] = std::move(i);
  // A resumed job's measurements so far, for its outlook.
  auto progress = services_.store->Progress(job_.id);
  if (!progress.ok()) return progress.status();
  for (const ProgressRecord& p : *progress) {
    if (job_.started_ms > 0 && p.at_ms >= job_.started_ms) {
      history_.push_back({.elapsed_s = (p.at_ms - job_.started_ms) / 1000.0,
                          .iterations = p.iterations,
                          .loss = p.loss});
    }
  }
  return StartWatch();
}

absl::Status JobRun::Log(absl::string_view kind, const std::string& detail) {
  return services_.store->AddEvent(job_.id, std::string(kind), detail, NowMs());
}

std::map<std::string, int> JobRun::LiveWorkers() const {
  std::map<std::string, int> live;
  for (const auto& [id, i] : instances_) {
    if (i.role == launcher::Role::kWorker && i.state != InstanceStatus::kEnded) {
      ++live[i.instance_type];
    }
  }
  return live;
}

int JobRun::WorkersOf(const std::string& type) const {
  const std::map<std::string, int> live = LiveWorkers();
  auto it = live.find(type);
  return it == live.end() ? 0 : it->second;
}

absl::Status JobRun::EndRevocationsOf(const std::string& instance_id, int64_t ended_ms) {
  auto revocations = services_.store->Revocations(job_.id);
  if (!revocations.ok()) return revocations.status();
  for (RevocationRecord& r : *revocations) {
    if (r.instance_id == instance_id && r.ended_ms == 0) {
      r.ended_ms = ended_ms;
      if (auto s = services_.store->PutRevocation(r); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

bool JobRun::Restoring(const std::vector<RevocationRecord>& revocations) const {
  for (const RevocationRecord& r : revocations) {
    auto it = instances_.find(r.instance_id);
    if (it == instances_.end() || it->second.role != launcher::Role::kParameterServer) continue;
    if (r.status == RevocationStatus::kPending) return true;
    if (r.status == RevocationStatus::kLaunched && r.takeover_reported_ms == 0) return true;
  }
  return false;
}

void JobRun::RegisterRunning() {
  for (const auto& [id, i] : instances_) {
    if (i.state != InstanceStatus::kRunning) continue;
    if (absl::Status s = Register(i); !s.ok()) {
      Emit(WarningEvent{.instance = id, .message = std::string(s.message())});
    }
  }
}

absl::StatusOr<JobRecord> JobRun::Run() {
  if (auto s = Load(); !s.ok()) return s;
  if (auto s = StartGuard(); !s.ok()) return s;
  if (auto s = ResumeZoneReturns(); !s.ok()) return s;
  if (sync_) {
    if (absl::Status s = EnsureRendezvous(); !s.ok()) {
      if (absl::Status f = Fail(absl::StrCat("rendezvous: ", s.message())); !f.ok()) return f;
      return job_;
    }
  }
  if (job_.state == JobState::kLaunching) {
    if (absl::Status s = LaunchPlanned(); !s.ok()) {
      if (absl::Status f = Fail(absl::StrCat("launch failed: ", s.message())); !f.ok()) return f;
      return job_;
    }
  } else {
    // Resumed: the instances run on; make sure the detector watches them. Not those already
    // going (a revocation is under way): registering a revoked instance again starts a new
    // lifetime for it in the detector, which would report its notice again.
    RegisterRunning();
    if (auto s = Log("resumed", ""); !s.ok()) return s;
    Emit(ResumedEvent{.instances = static_cast<int>(instances_.size())});
  }
  if (services_.open_feed) {
    feed_ = services_.open_feed(job_.id, static_cast<uint64_t>(job_.last_event_seq));
  }
  absl::Status status = Loop();
  feed_.reset();
  if (!status.ok()) return status;
  return job_;
}

absl::Status JobRun::Loop() {
  absl::Time next_progress = clock_.Now();
  absl::Time next_describe = clock_.Now();
  const std::string output = services_.provider->OutputLocation();
  const std::string where =
      output.empty() ? "" : absl::StrCat("; the instances' output is in ", output);
  // The rules that end the job (stop_rules.h), asked in this order each tick.
  const TargetRule target;
  const OutlookRule outlook;
  const ForecastRule forecast_rule;
  StallRule stall(options_.stall_timeout, job_.iterations_done, clock_.Now(), where);
  const WorkersLeftRule workers_left(spec_.worker_command, where);
  while (true) {
    if (detach_.load()) {
      return absl::CancelledError(
          absl::StrCat("detached from job ", job_.id, ": its instances run on"));
    }
    if (auto s = HandleFeed(); !s.ok()) return s;
    if (auto s = HandlePending(); !s.ok()) return s;
    if (auto s = GuardTick(); !s.ok()) return s;       // job_deadline.cc
    if (auto s = ZoneReturnTick(); !s.ok()) return s;  // job_zone_return.cc
    if (clock_.Now() >= next_describe) {
      if (auto s = PollInstances(); !s.ok()) return s;
      next_describe = clock_.Now() + options_.describe_every;
    }
    // After the look at the provider, which may have found an instance lost.
    auto revocations = services_.store->Revocations(job_.id);
    if (!revocations.ok()) return revocations.status();
    restoring_ = Restoring(*revocations);
    if (absl::Status p = PollProgress(); !p.ok()) {
      // The profiler may be restarting: say so once, not on every tick.
      if (p.message() != last_warning_) {
        if (auto s = Log("warning", std::string(p.message())); !s.ok()) return s;
        Emit(WarningEvent{.message = std::string(p.message())});
      }
      last_warning_ = std::string(p.message());
    } else {
      last_warning_.clear();
    }
    if (auto s = WatchConvergence(); !s.ok()) return s;
    if (clock_.Now() >= next_progress) {
      if (auto s = ShowProgress(); !s.ok()) return s;
      next_progress = clock_.Now() + options_.progress_every;
    }
    if (target.Check(job_, spec_).Stops()) {
      if (auto s = ShowProgress(); !s.ok()) return s;
      return Finish();
    }
    // Stopped for its target only as the last resort: with a forecast, when it is late even at
    // its best case, a re-plan could not help and the measured loss agrees; without one, when
    // even the measured loss's best case misses the deadline.
    const Outlook now = CurrentOutlook();
    const StopDecision stop =
        watch_ != nullptr
            ? forecast_rule.Check(
                  {.forecast = forecast_.has_value() ? &*forecast_ : nullptr,
                   .deadline_s = ForecastDeadline(),
                   .elapsed_s = ElapsedS(),
                   .restoring = restoring_,
                   .replanned = late_replan_.has_value(),
                   .replan_helped = late_replan_.has_value() && late_replan_->helped,
                   .replan_at_s = late_replan_.has_value() ? late_replan_->at_s : 0,
                   .replan_outcome = late_replan_.has_value() ? late_replan_->outcome : "",
                   .outlook = &now})
        : restoring_ ? StopDecision::GoOn()
                     : outlook.Check(now);
    if (stop.Stops()) {
      if (auto st = ShowProgress(); !st.ok()) return st;
      if (auto st = Log("decision", absl::StrCat("stop: ", stop.why)); !st.ok()) return st;
      return Fail(stop.why);
    }
    if (StopDecision d = stall.Check(job_.iterations_done, job_.target_iterations, clock_.Now());
        d.Stops()) {
      return Fail(d.why);
    }
    const bool pending = std::any_of(
        revocations->begin(), revocations->end(),
        [](const RevocationRecord& r) { return r.status == RevocationStatus::kPending; });
    // On fallback the deadline guard may wait for spot with no worker running, on purpose.
    const bool waiting = guard_ != nullptr && guard_->OnFallback();
    if (StopDecision d = workers_left.Check(LiveWorkers().size(), pending || waiting,
                                            last_exit_.has_value() ? &*last_exit_ : nullptr);
        d.Stops()) {
      return Fail(d.why);
    }
    clock_.Sleep(options_.tick);
  }
}

absl::Status JobRun::PollProgress() {
  auto progress = services_.profiler->GetJobProgress(job_.id);
  if (!progress.ok()) {
    return absl::Status(
        progress.status().code(),
        absl::StrCat("reading progress from the profiler: ", progress.status().message()));
  }
  // Steps a parameter-server takeover undid were counted by the workers that made them.
  job_.iterations_done =
      sync_ ? SyncStepsDone(*progress)
            : std::max(0.0, static_cast<double>(progress->total_steps()) - job_.steps_lost);
  if (sync_) {
    if (auto s = CloseRestarts(*progress); !s.ok()) return s;
  }
  double sum = 0;
  int reporting = 0;
  std::vector<std::string> raw;
  // Every rank of a synchronous job reports the global batch's loss, and a restarted rank
  // reports under a new worker id: the loss is the stream's at the highest step.
  const pb::WorkerProgress* furthest = nullptr;
  for (const pb::WorkerProgress& w : progress->workers()) {
    if (w.last_loss() > 0 && (furthest == nullptr || w.steps() > furthest->steps())) furthest = &w;
  }
  for (const pb::WorkerProgress& w : progress->workers()) {
    // A rank's stream is named after its instance ("INSTANCE-rankL...").
    const std::string instance =
        sync_ ? w.worker_id().substr(0, w.worker_id().rfind("-rank")) : w.worker_id();
    auto it = instances_.find(instance);
    const bool ended = it != instances_.end() && it->second.state == InstanceStatus::kEnded;
    if (w.last_loss() > 0 && (sync_ ? &w == furthest : !ended)) {
      sum += w.last_loss();
      ++reporting;
      raw.push_back(absl::StrFormat("%s=%.4g", w.worker_id(), w.last_loss()));
    }
    if (!reported_workers_.insert(instance).second) continue;
    if (auto s = MarkTakeoverReported(instance); !s.ok()) return s;
  }
  if (reporting > 0) {
    // The running workers' mean, smoothed over the polls (each worker reports a noisy value).
    job_.loss = SmoothLoss(job_.loss, sum / reporting);
    job_.worker_losses = absl::StrJoin(raw, ",");
  }
  if (job_.started_ms > 0 &&
      (history_.empty() || history_.back().iterations != job_.iterations_done)) {
    history_.push_back({.elapsed_s = (NowMs() - job_.started_ms) / 1000.0,
                        .iterations = job_.iterations_done,
                        .loss = job_.loss});
    if (history_.size() > 4000) {  // thinned: every other point, the span kept
      std::vector<LossPoint> kept;
      for (size_t i = 0; i < history_.size(); i += 2) kept.push_back(history_[i]);
      kept.push_back(history_.back());
      history_ = std::move(kept);
    }
  }
  return Save();
}

Outlook JobRun::CurrentOutlook() {
  return EstimateOutlook(
      {.target_loss = spec_.target_loss,
       .deadline_s = spec_.deadline_s > 0 ? std::max(1e-3, spec_.deadline_s - job_.profiling_s) : 0,
       .planned_iterations = job_.target_iterations,
       .iterations_done = job_.iterations_done,
       .elapsed_s = (NowMs() - job_.started_ms) / 1000.0,
       .history = history_});
}

double JobRun::CostSoFar() {
  const int64_t now = NowMs();
  double cost = 0;
  for (const auto& [id, i] : instances_) {
    const int64_t stop = i.ended_ms > 0 ? i.ended_ms : now;
    cost += i.price_per_hour * std::max<int64_t>(0, stop - i.launched_ms) / 3.6e6;
  }
  return cost;
}

absl::Status JobRun::PollInstances() {
  auto described = services_.provider->Describe(job_.id);
  if (!described.ok()) return described.status();
  std::map<std::string, const launcher::Instance*> seen;
  for (const launcher::Instance& i : *described) seen[i.id] = &i;
  for (auto& [id, r] : instances_) {
    if (r.state == InstanceStatus::kEnded) continue;
    auto it = seen.find(id);
    const bool gone = it == seen.end() || launcher::IsGone(it->second->state);
    if (!gone) continue;
    const bool was_running = r.state == InstanceStatus::kRunning;
    r.state = InstanceStatus::kEnded;
    r.ended_ms = it != seen.end() && it->second->end_time != absl::InfiniteFuture()
                     ? absl::ToUnixMillis(it->second->end_time)
                     : NowMs();
    if (auto s = services_.store->PutInstance(r); !s.ok()) return s;
    if (auto s = EndRevocationsOf(id, r.ended_ms); !s.ok()) return s;
    if (auto s = Log("ended", id); !s.ok()) return s;
    const launcher::CommandEnd* command_end =
        was_running && it != seen.end() && it->second->command_end.has_value()
            ? &*it->second->command_end
            : nullptr;
    Emit(InstanceEndedEvent{.instance = id,
                            .instance_type = r.instance_type,
                            .command_end = command_end != nullptr ? command_end->how : ""});
    if (!was_running) continue;  // its notice came first: taken over already
    if (command_end != nullptr) {
      if (auto s = OnCommandEnd(r, *command_end); !s.ok()) return s;
      continue;
    }
    // Gone without a notice and without its command's end (killed together with its agent, a
    // VM the cloud took away): lost, and taken over as a revocation, unless the detector's
    // report of it came first.
    auto revocations = services_.store->Revocations(job_.id);
    if (!revocations.ok()) return revocations.status();
    if (std::none_of(revocations->begin(), revocations->end(),
                     [&](const RevocationRecord& v) { return v.instance_id == id; })) {
      if (auto s = RecordRevocation(r, "lost", /*notice=*/false, 0, 0); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status JobRun::OnCommandEnd(const InstanceRecord& instance, const launcher::CommandEnd& end) {
  if (!exited_.insert(instance.id).second) return absl::OkStatus();  // told twice
  const nlohmann::json detail = {{"instance", instance.id},
                                 {"status", end.status},
                                 {"how", end.how},
                                 {"last_lines", end.last_lines}};
  if (auto s = Log("exited", detail.dump()); !s.ok()) return s;
  if (services_.detector != nullptr) (void)services_.detector->Unregister(instance.id);
  if (instance.role == launcher::Role::kWorker) {
    last_exit_ = WorkerExit{.instance = instance.id,
                            .status = end.status,
                            .how = end.how,
                            .last_lines = end.last_lines};
  }
  return absl::OkStatus();
}

absl::Status JobRun::ShowProgress() {
  // Never the same line twice: no new iteration within a period of the last line, none shown
  // (the end's line right after a periodic one).
  if (job_.iterations_done == last_shown_iterations_ &&
      clock_.Now() - last_shown_at_ < options_.progress_every) {
    return absl::OkStatus();
  }
  last_shown_iterations_ = job_.iterations_done;
  last_shown_at_ = clock_.Now();
  const Outlook outlook = CurrentOutlook();
  ProgressEvent p{.elapsed_s = (NowMs() - job_.started_ms) / 1000.0,
                  .iterations_done = job_.iterations_done,
                  .target_iterations = job_.target_iterations,
                  .first_plan_iterations = first_plan_iterations_,
                  .predicted_iterations = outlook.predicted_iterations,
                  .target_loss = spec_.target_loss,
                  .steps_lost = job_.steps_lost,
                  .cost_usd = job_.profiling_cost_usd + CostSoFar(),
                  .eta_s = outlook.eta_s};
  if (outlook.predicted_iterations > 0 && spec_.target_loss > 0 &&
      job_.iterations_done > job_.target_iterations) {
    p.predicted_by = "measured loss";
  }
  if (forecast_.has_value()) {
    // The job's one forecast: the line shows what it says now, whatever made it.
    const double held =
        spec_.confidence > 0 ? forecast_->iterations_p90 : forecast_->iterations_p50;
    p.predicted_by = "forecast";
    p.forecast_source = forecast_->source;
    p.forecast_step = forecast_->step;
    p.forecast_unreachable = !forecast_->reachable || !std::isfinite(held);
    p.predicted_iterations = p.forecast_unreachable ? 0 : std::max(held, job_.iterations_done);
    const double speed = outlook.iterations_per_s;
    p.eta_s = std::nullopt;
    if (!p.forecast_unreachable && speed > 0) {
      p.eta_s = std::max(0.0, (p.predicted_iterations - job_.iterations_done) / speed);
    }
  }
  if (job_.loss > 0) p.loss = job_.loss;
  for (const auto& [id, i] : instances_) {
    if (i.role != launcher::Role::kWorker) continue;
    p.workers_running += i.state == InstanceStatus::kRunning;
    p.workers_revoking += i.state == InstanceStatus::kRevoking;
  }
  if (spec_.deadline_s > 0) p.deadline_in_s = spec_.deadline_s - job_.profiling_s - p.elapsed_s;
  Emit(std::move(p));
  return services_.store->AddProgress(
      job_.id, {.at_ms = NowMs(), .iterations = job_.iterations_done, .loss = job_.loss});
}

absl::Status JobRun::Finish() {
  // Every instance, stopped ones too, so that the provider forgets them (NOT_FOUND: it has).
  std::vector<std::string> ids;
  for (const auto& [id, i] : instances_) ids.push_back(id);
  absl::Status terminated = services_.provider->Terminate(ids);
  if (!terminated.ok() && !absl::IsNotFound(terminated)) return terminated;
  const int64_t now = NowMs();
  for (auto& [id, i] : instances_) {
    if (i.state != InstanceStatus::kEnded) {
      i.state = InstanceStatus::kEnded;
      i.ended_ms = now;
      if (auto s = services_.store->PutInstance(i); !s.ok()) return s;
    }
    if (services_.detector != nullptr) {
      absl::Status s = services_.detector->Unregister(id);
      // NOT_FOUND: the detector forgot it already (a restarted detector without its database).
      if (!s.ok() && !absl::IsNotFound(s)) {
        Emit(WarningEvent{
            .instance = id,
            .message = absl::StrCat("unregistering from the detector: ", s.message())});
      }
    }
    if (auto s = EndRevocationsOf(id, i.ended_ms); !s.ok()) return s;
  }
  if (absl::Status s = StopJobRendezvous(); !s.ok()) {
    Emit(WarningEvent{.message = std::string(s.message())});
  }
  if (job_.state != JobState::kFailed) job_.state = JobState::kFinished;
  job_.finished_ms = now;
  if (auto s = Save(); !s.ok()) return s;
  if (auto s = Log(Name(job_.state), job_.message); !s.ok()) return s;
  auto summary = SummarizeJob(*services_.store, job_.id, now);
  if (!summary.ok()) return summary.status();
  Emit(EndedEvent{.state = job_.state, .message = job_.message, .summary = *std::move(summary)});
  return absl::OkStatus();
}

absl::Status JobRun::Fail(const std::string& why) {
  job_.state = JobState::kFailed;
  job_.message = why;
  return Finish();
}

}  // namespace spotdnn::job
