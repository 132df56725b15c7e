// Revocation events from the detector, and the takeovers they lead to.
#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/gateway/job/job_run.h"
#include "services/gateway/job/job_summary.h"

namespace spotdnn::job {

absl::Status JobRun::HandleFeed() {
  if (feed_ == nullptr) return absl::OkStatus();
  for (const FeedItem& item : feed_->Drain()) {
    if (item.has_value()) {
      if (auto s = HandleEvent(*item); !s.ok()) return s;
      continue;
    }
    // The detector lost its event log, and maybe its registrations: number afresh, and make
    // sure it watches the running instances.
    if (auto s = Log("warning",
                     absl::StrCat("the detector's event log restarted (after sequence ",
                                  job_.last_event_seq, "); re-registered the running instances"));
        !s.ok()) {
      return s;
    }
    job_.last_event_seq = 0;
    RegisterRunning();
    if (auto s = Save(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status JobRun::HandleEvent(const pb::RevocationEvent& event) {
  if (static_cast<int64_t>(event.sequence()) <= job_.last_event_seq) return absl::OkStatus();
  job_.last_event_seq = static_cast<int64_t>(event.sequence());
  if (auto it = instances_.find(event.instance_id());
      it != instances_.end() && event.kind() == pb::RevocationEvent::KIND_EXITED) {
    // Logged as the job's "exited" event there, with its status and last lines.
    if (auto s = HandleExit(it->second, event); !s.ok()) return s;
    return Save();
  }
  // A kind this gateway does not know (a newer detector) is logged by number ("unknown-7").
  const std::string kind = services::EnumLabel(event.kind());
  if (auto s =
          Log(kind, absl::StrCat(event.instance_id(), " ", event.action(), " ", event.detail()));
      !s.ok()) {
    return s;
  }
  auto it = instances_.find(event.instance_id());
  if (it == instances_.end()) return Save();
  InstanceRecord& instance = it->second;
  // An instance whose command ended by itself falls silent: not a loss.
  const bool goes =
      event.kind() == pb::RevocationEvent::KIND_NOTICE ||
      event.kind() == pb::RevocationEvent::KIND_REVOKED ||
      (event.kind() == pb::RevocationEvent::KIND_LOST && exited_.count(instance.id) == 0);
  // An instance that went before its notice was handled (a gateway that was down, a command
  // that stopped at the notice signal) still needs its takeover, once.
  bool handled = instance.state == InstanceStatus::kRevoking;
  if (goes && instance.state == InstanceStatus::kEnded) {
    auto revocations = services_.store->Revocations(job_.id);
    if (!revocations.ok()) return revocations.status();
    handled = std::any_of(revocations->begin(), revocations->end(),
                          [&](const RevocationRecord& r) { return r.instance_id == instance.id; });
  }
  if (goes && !handled) {
    if (auto s = RecordRevocation(instance, kind, event.kind() == pb::RevocationEvent::KIND_NOTICE,
                                  event.notice_unix_ms(), event.effective_unix_ms());
        !s.ok()) {
      return s;
    }
  }
  return Save();
}

absl::Status JobRun::HandleExit(InstanceRecord& instance, const pb::RevocationEvent& event) {
  // Where the provider saw the end first (the local provider reads it from the instance's log),
  // it was handled then; an instance already going (its notice first) stays a revocation.
  if (exited_.count(instance.id) > 0 || instance.state != InstanceStatus::kRunning) {
    return absl::OkStatus();
  }
  const launcher::CommandEnd end{
      .status = event.exit_status(),
      .how = event.detail(),
      .last_lines = {event.last_lines().begin(), event.last_lines().end()}};
  instance.state = InstanceStatus::kEnded;
  instance.ended_ms = NowMs();
  if (auto s = services_.store->PutInstance(instance); !s.ok()) return s;
  if (auto s = Log("ended", instance.id); !s.ok()) return s;
  Emit(InstanceEndedEvent{
      .instance = instance.id, .instance_type = instance.instance_type, .command_end = end.how});
  if (auto s = OnCommandEnd(instance, end); !s.ok()) return s;
  // Its agent has gone; the machine would run (and be paid for) with nothing to do.
  if (absl::Status s = services_.provider->Terminate({instance.id});
      !s.ok() && !absl::IsNotFound(s)) {
    return Log("warning", absl::StrCat("terminating ", instance.id,
                                       " after its command ended: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status JobRun::RecordRevocation(InstanceRecord& instance, const std::string& kind,
                                      bool notice, int64_t notice_ms, int64_t effective_ms) {
  if (instance.state == InstanceStatus::kRunning) {
    instance.state = notice ? InstanceStatus::kRevoking : InstanceStatus::kEnded;
    if (!notice) instance.ended_ms = NowMs();
    if (auto s = services_.store->PutInstance(instance); !s.ok()) return s;
  }
  RevocationRecord r{.job_id = job_.id,
                     .instance_id = instance.id,
                     .kind = kind,
                     .cloud_notice_ms = notice_ms,
                     .effective_ms = effective_ms,
                     .received_ms = NowMs(),
                     .ended_ms = instance.ended_ms};
  if (auto s = services_.store->PutRevocation(r); !s.ok()) return s;
  if (sync_ && instance.role == launcher::Role::kWorker) {
    // A synchronous job stops every rank for this: torchrun re-forms the group on the
    // survivors (its own timeouts), from the last checkpoint, and the replacement joins later.
    RestartSummary restart{.instance = instance.id,
                           .cause = kind,
                           .notice_ms = r.cloud_notice_ms > 0 ? r.cloud_notice_ms : r.received_ms,
                           .steps_at_notice = job_.iterations_done};
    if (auto s = Log("restart", RestartJson(restart)); !s.ok()) return s;
    open_restarts_.push_back(std::move(restart));
  }
  Emit(NoticeEvent{
      .instance = instance.id,
      .instance_type = instance.instance_type,
      .kind = kind,
      .parameter_server = instance.role == launcher::Role::kParameterServer,
      .effective = effective_ms > 0 ? absl::FromUnixMillis(effective_ms) : absl::InfinitePast()});
  return absl::OkStatus();
}

absl::Status JobRun::HandlePending() {
  auto revocations = services_.store->Revocations(job_.id);
  if (!revocations.ok()) return revocations.status();
  for (RevocationRecord& r : *revocations) {
    if (r.status != RevocationStatus::kPending) continue;
    absl::Status s = Takeover(r);
    if (s.ok()) continue;
    r.status = RevocationStatus::kFailed;
    r.detail = std::string(s.message());
    if (auto st = services_.store->PutRevocation(r); !st.ok()) return st;
    if (auto st =
            Log("error", absl::StrCat("takeover for ", r.instance_id, " failed: ", s.message()));
        !st.ok()) {
      return st;
    }
    Emit(TakeoverFailedEvent{.instance = r.instance_id, .error = std::string(s.message())});
  }
  return absl::OkStatus();
}

absl::Status JobRun::Takeover(RevocationRecord& revocation) {
  if (instances_[revocation.instance_id].role == launcher::Role::kParameterServer) {
    return ServerTakeover(revocation);
  }
  pb::ReplanResponse replan;
  if (!revocation.replan_json.empty()) {
    if (auto s = FromStoredJson(revocation.replan_json, "re-plan", &replan); !s.ok()) return s;
  } else {
    std::map<std::string, int> survivors, before;
    for (const auto& [id, i] : instances_) {
      if (i.role != launcher::Role::kWorker) continue;
      if (i.state == InstanceStatus::kRunning) ++survivors[i.instance_type];
      if (i.state != InstanceStatus::kEnded || id == revocation.instance_id) {
        ++before[i.instance_type];
      }
    }
    // Every revocation ends in a takeover or in a decision not to replace the instance, with the
    // reason and its effect on the finish; the re-plan starts from the job's one measure of
    // progress: its forecast (the plan's model refitted to the job's own loss) when it has one.
    std::string not_replaced;
    absl::StatusOr<pb::ReplanResponse> replanned;
    double needed = 0;  // with a forecast: the global steps the new cluster needs from the start
    std::string fastest;
    int from_workers = 1;  // the cluster the steps so far were made on, and its R
    double from_r = 0;
    if (TargetReached(job_, spec_)) {
      not_replaced = absl::StrCat("not replaced: the job has reached its target (",
                                  TargetDescription(job_, spec_), "); it finishes now");
    } else if (watch_ != nullptr) {
      auto planned = ReplanFromForecast(survivors, ClusterOf(before), "re-planning");
      if (!planned.ok()) {
        replanned = planned.status();
      } else if (!planned->unreachable.empty()) {
        replanned = absl::FailedPreconditionError(planned->unreachable);
      } else {
        replanned = std::move(planned->replan);
        needed = planned->needed;
        fastest = planned->fastest;
        from_workers = planned->from_workers;
        from_r = planned->from_r;
      }
    } else {
      replanned =
          RequestReplan(survivors, ClusterOf(before), job_.iterations_done, {}, "re-planning");
    }
    auto like_for_like = [&](const std::string& why) {
      replan.mutable_plan()->mutable_to_launch()->Clear();
      pb::InstanceCount* c = replan.mutable_plan()->mutable_to_launch()->add_instances();
      c->set_instance_type(instances_[revocation.instance_id].instance_type);
      c->set_count(1);
      // The instance's pace as the current plan predicts it (a failed re-plan predicts none).
      if (!replan.plan().has_prediction()) {
        *replan.mutable_plan()->mutable_prediction() = plan_.prediction();
      }
      revocation.detail = why;
    };
    if (!not_replaced.empty()) {
      replan.mutable_plan()->set_feasible(true);
      revocation.detail = not_replaced;
    } else if (!replanned.ok()) {
      // The re-plan could not be made: the cluster is kept as planned, the instance replaced.
      like_for_like(absl::StrCat("re-planning failed (", replanned.status().message(),
                                 "); replaced like for like"));
    } else if (replan = *std::move(replanned); !replan.plan().feasible()) {
      // No plan meets the deadline any more: replace like for like and finish as early as can be.
      like_for_like(absl::StrCat("no plan meets the SLO any more (", replan.plan().reason(),
                                 "); replaced like for like"));
    } else {
      // The rest of the job, on the new cluster, from the progress so far: under the model the
      // iterations still needed depend on the cluster that does them.
      const pb::Prediction& p = replan.plan().prediction();
      job_.target_iterations =
          watch_ != nullptr ? needed : job_.iterations_done + p.normalized_iterations();
      // The current plan's prediction for the whole job, beside its iterations: the time and
      // cost so far, then the re-plan's (the summary shows it next to the first plan's).
      const double elapsed_s = ElapsedS();
      job_.predicted_time_s = elapsed_s + replan.plan().time_s();
      job_.predicted_cost_usd = CostSoFar() + replan.plan().cost_usd();
      if (watch_ != nullptr) {
        cluster_r_ = p.convergence_coefficient();
        const ConvergenceForecast f = ForecastForPlan(
            replan.plan(), WorkersAfter(replan.plan(), survivors), needed, from_workers, from_r);
        if (auto st = AdoptForecast(f); !st.ok()) return st;
        if (replan.plan().to_launch().instances().empty()) {
          revocation.detail = absl::StrFormat(
              "not replaced: the %d surviving workers reach the target at step %.0f (the current "
              "forecast), finishing at about %.0f s, within the %.0f s deadline",
              f.workers, f.iterations_p50, f.finish_p50_s, ForecastDeadline());
        } else if (!fastest.empty()) {
          revocation.detail = fastest.substr(2);
        }
      } else if (replan.plan().to_launch().instances().empty()) {
        revocation.detail = absl::StrFormat(
            "not replaced: the surviving workers finish the rest (%.0f more iterations) in a "
            "predicted %.0f s, within the SLO",
            p.normalized_iterations(), replan.plan().time_s());
      }
    }
    revocation.replanned_ms = NowMs();
    revocation.replan_json = ToStoredJson(replan);
    revocation.takeover_token = absl::StrCat(job_.id, "-takeover-", ++job_.takeovers);
    revocation.takeover_first_index = job_.next_worker_index;
    for (const pb::InstanceCount& c : replan.plan().to_launch().instances()) {
      job_.next_worker_index += c.count();
    }
    // Written before launching: a resumed gateway re-issues the same launches.
    if (auto st = Save(); !st.ok()) return st;
    if (auto st = services_.store->PutRevocation(revocation); !st.ok()) return st;
    Emit(ReplannedEvent{.instance = revocation.instance_id,
                        .feasible = replan.plan().feasible(),
                        .to_launch = CountsOf(replan.plan().to_launch()),
                        .more_iterations = watch_ != nullptr && needed > 0
                                               ? needed - job_.iterations_done
                                               : replan.plan().prediction().normalized_iterations(),
                        .predicted_time_s = replan.plan().time_s(),
                        .predicted_cost_usd = replan.plan().cost_usd(),
                        .remaining_time_s = replan.remaining_time_s(),
                        .replan_ms = revocation.replanned_ms - revocation.received_ms,
                        .detail = revocation.detail});
  }
  auto launched = Launch(CountsOf(replan.plan().to_launch()), revocation.takeover_first_index,
                         revocation.takeover_token + "-", replan.plan().prediction(),
                         LaunchReason::kTakeover, /*with_servers=*/false);
  if (!launched.ok()) return launched.status();
  std::vector<std::string> ids;
  for (const launcher::Instance& i : launched->instances) ids.push_back(i.id);
  if (!launched->error.ok()) return launched->error;
  if (!launched->exhausted_types.empty()) {
    // No spot capacity for the takeover: the deadline guard takes the type on (on-demand while
    // spot is short, job_deadline.cc) when the job falls back; else the takeover fails.
    for (const std::string& type : launched->exhausted_types) {
      if (!GuardHandles(type)) return launched->capacity_errors[type];
    }
    for (const std::string& type : launched->exhausted_types) {
      const int wanted = RunningOn(type, launcher::Market::kSpot) +
                         RunningOn(type, launcher::Market::kOnDemand) + launched->shortfall[type];
      if (auto s = SpotShort(type, wanted); !s.ok()) return s;
    }
    revocation.detail =
        absl::StrCat(revocation.detail.empty() ? "" : revocation.detail + "; ",
                     "no spot capacity for ", absl::StrJoin(launched->exhausted_types, ", "),
                     ": the deadline guard decides what runs (on-demand while spot is short)");
    return RecordTakeover(revocation, ids,
                          ids.empty() ? RevocationStatus::kNoneNeeded : RevocationStatus::kLaunched,
                          /*save_job=*/false);
  }
  return RecordTakeover(revocation, ids,
                        ids.empty() ? RevocationStatus::kNoneNeeded : RevocationStatus::kLaunched,
                        /*save_job=*/false);
}

absl::Status JobRun::RecordTakeover(RevocationRecord& revocation,
                                    const std::vector<std::string>& ids, RevocationStatus status,
                                    bool save_job) {
  revocation.takeover_ids = absl::StrJoin(ids, ",");
  revocation.takeover_launched_ms = NowMs();
  revocation.status = status;
  if (auto st = services_.store->PutRevocation(revocation); !st.ok()) return st;
  if (save_job) {
    if (auto st = Save(); !st.ok()) return st;
  }
  if (auto st =
          Log("takeover", absl::StrCat(revocation.instance_id, " -> ", revocation.takeover_ids));
      !st.ok()) {
    return st;
  }
  const int64_t notice =
      revocation.cloud_notice_ms > 0 ? revocation.cloud_notice_ms : revocation.received_ms;
  if (ids.empty()) {
    // A decision not to replace: logged with its reason and its effect on the finish.
    if (auto st = Log("decision", absl::StrCat(revocation.instance_id, " ", revocation.detail));
        !st.ok()) {
      return st;
    }
  }
  Emit(TakeoverEvent{.instance = revocation.instance_id,
                     .takeover = ids,
                     .notice_to_running_ms = revocation.takeover_launched_ms - notice,
                     .detail = revocation.detail});
  return absl::OkStatus();
}

absl::Status JobRun::MarkTakeoverReported(const std::string& worker_id) {
  auto it = instances_.find(worker_id);
  if (it == instances_.end() || it->second.reason != LaunchReason::kTakeover) {
    return absl::OkStatus();
  }
  auto revocations = services_.store->Revocations(job_.id);
  if (!revocations.ok()) return revocations.status();
  for (RevocationRecord& r : *revocations) {
    std::vector<std::string> ids = absl::StrSplit(r.takeover_ids, ',', absl::SkipEmpty());
    if (r.takeover_reported_ms == 0 && std::count(ids.begin(), ids.end(), worker_id) > 0) {
      r.takeover_reported_ms = NowMs();
      if (auto st = services_.store->PutRevocation(r); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::job

namespace spotdnn::job {

absl::StatusOr<double> JobRun::CheckpointStep(int index) {
  const std::string name = absl::StrCat("ps-", index, ".json");
  absl::StatusOr<std::string> manifest;
  if (!spec_.checkpoint_uri.empty()) {
    manifest =
        services_.read_checkpoint
            ? services_.read_checkpoint(CheckpointUriIn(spec_, job_.id, CheckpointRegion()), name)
            : absl::UnimplementedError("no reader for " + spec_.checkpoint_uri);
  } else if (services_.provider->SharesFilesWithCaller() && !options_.checkpoint_root.empty()) {
    manifest = services::ReadFile(
        (std::filesystem::path(options_.checkpoint_root) / job_.id / name).string());
  } else {
    return 0.0;  // nowhere to read one: the replacement starts from scratch
  }
  if (absl::IsNotFound(manifest.status())) return 0.0;
  if (!manifest.ok()) return manifest.status();
  nlohmann::json doc = nlohmann::json::parse(*manifest, nullptr, false);
  if (!doc.is_object() || !doc["step"].is_number() || doc["step"].get<double>() < 0) {
    return absl::DataLossError(
        absl::StrCat(name, " of job ", job_.id,
                     " is not {\"step\": N, \"file\": ...}: ", manifest->substr(0, 200)));
  }
  return doc["step"].get<double>();
}

absl::Status JobRun::ServerTakeover(RevocationRecord& revocation) {
  InstanceRecord& server = instances_[revocation.instance_id];
  if (server.state != InstanceStatus::kEnded) {
    // Its agent gave it the notice signal: it writes its last checkpoint and exits. Wait for
    // that, or for the cloud's deadline (and a little more) if it does not exit.
    const int64_t give_up = revocation.effective_ms > 0 ? revocation.effective_ms + 5000
                                                        : revocation.received_ms + 30000;
    if (NowMs() < give_up) return absl::OkStatus();
  }
  pb::ReplanResponse relaunch;
  if (!revocation.replan_json.empty()) {
    if (auto s = FromStoredJson(revocation.replan_json, "takeover", &relaunch); !s.ok()) return s;
  } else {
    auto step = CheckpointStep(server.index);
    if (!step.ok()) return step.status();
    const double lost = std::max(0.0, job_.iterations_done - *step);
    job_.steps_lost += lost;
    job_.iterations_done -= lost;
    // The measurements past the checkpoint belong to steps the restore undid: the curve is
    // measured again from there.
    history_.erase(std::remove_if(history_.begin(), history_.end(),
                                  [&](const LossPoint& p) { return p.iterations > *step; }),
                   history_.end());
    if (watch_ != nullptr) watch_->Rewind(*step + 1);
    // The workers start again against the replacement: the same composition.
    for (const auto& [type, n] : LiveWorkers()) {
      pb::InstanceCount* c = relaunch.mutable_plan()->mutable_to_launch()->add_instances();
      c->set_instance_type(type);
      c->set_count(n);
    }
    relaunch.mutable_plan()->set_feasible(true);
    *relaunch.mutable_plan()->mutable_prediction() = plan_.prediction();
    revocation.detail = absl::StrFormat(
        "parameter server %d restored from the checkpoint at step %.0f; %.0f step%s lost",
        server.index, *step, lost, lost == 1 ? "" : "s");
    revocation.replanned_ms = NowMs();
    revocation.replan_json = ToStoredJson(relaunch);
    revocation.takeover_token = absl::StrCat(job_.id, "-takeover-", ++job_.takeovers);
    revocation.takeover_first_index = job_.next_worker_index;
    for (const pb::InstanceCount& c : relaunch.plan().to_launch().instances()) {
      job_.next_worker_index += c.count();
    }
    // Written before launching: a resumed gateway re-issues the same launches.
    if (auto st = Save(); !st.ok()) return st;
    if (auto st = services_.store->PutRevocation(revocation); !st.ok()) return st;
    if (auto st = Log("ps-takeover", revocation.detail); !st.ok()) return st;
    Emit(WarningEvent{.instance = server.id, .message = revocation.detail});
  }
  // The replacement, with the revoked one's index (it restores that index's checkpoint).
  launcher::ClusterLaunchRequest request{
      .job_id = job_.id,
      .command = spec_.worker_command,
      .ps_command = spec_.ps_command,
      .parameter_servers = 1,
      .parameter_server_type = server.instance_type,
      .ps_first_index = server.index,
      .ps_token = revocation.takeover_token + "-ps",
      .extra_env =
          JobEnvironment(job_.id, spec_, options_, *services_.provider, 0, CheckpointRegion())};
  auto replaced = launcher::LaunchCluster(*services_.provider, request);
  if (!replaced.ok()) return replaced.status();
  if (!replaced->error.ok()) return replaced->error;
  std::vector<std::string> ids;
  for (const launcher::Instance& i : replaced->instances) {
    if (auto s = Record(i, LaunchReason::kTakeover, launcher::ClientTokenFor(request.ps_token), 0);
        !s.ok()) {
      return s;
    }
    ids.push_back(i.id);
  }
  std::vector<std::string> addresses = absl::StrSplit(job_.ps_addresses, ',', absl::SkipEmpty());
  if (server.index >= 0 && server.index < static_cast<int>(addresses.size()) &&
      !replaced->ps_addresses.empty()) {
    addresses[server.index] = replaced->ps_addresses.front();
  }
  job_.ps_addresses = absl::StrJoin(addresses, ",");
  // The workers that trained against the revoked server stop; new ones join the replacement.
  std::vector<std::string> old_workers;
  for (auto& [id, i] : instances_) {
    if (i.role == launcher::Role::kWorker && i.state != InstanceStatus::kEnded &&
        i.launched_ms <= revocation.replanned_ms) {
      old_workers.push_back(id);
    }
  }
  if (!old_workers.empty()) {
    absl::Status s = services_.provider->Terminate(old_workers);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    for (const std::string& id : old_workers) {
      InstanceRecord& w = instances_[id];
      w.state = InstanceStatus::kEnded;
      w.ended_ms = NowMs();
      if (auto st = services_.store->PutInstance(w); !st.ok()) return st;
    }
  }
  auto launched = Launch(CountsOf(relaunch.plan().to_launch()), revocation.takeover_first_index,
                         revocation.takeover_token + "-w-", relaunch.plan().prediction(),
                         LaunchReason::kTakeover, /*with_servers=*/false);
  if (!launched.ok()) return launched.status();
  for (const launcher::Instance& i : launched->instances) ids.push_back(i.id);
  if (!launched->error.ok()) return launched->error;
  return RecordTakeover(revocation, ids, RevocationStatus::kLaunched, /*save_job=*/true);
}

}  // namespace spotdnn::job
