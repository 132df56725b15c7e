#include "services/gateway/job/job_summary.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "services/gateway/job/job_outlook.h"
#include "services/gateway/job/job_spec.h"

namespace spotdnn::job {

std::string RestartJson(const RestartSummary& restart) {
  nlohmann::json doc = {{"instance", restart.instance},
                        {"cause", restart.cause},
                        {"notice_ms", restart.notice_ms},
                        {"steps_at_notice", restart.steps_at_notice}};
  if (restart.stepping_s) doc["stepping_s"] = *restart.stepping_s;
  if (restart.steps_redone) doc["steps_redone"] = *restart.steps_redone;
  if (restart.resumed_step > 0) doc["resumed_step"] = restart.resumed_step;
  return doc.dump();
}

absl::StatusOr<RestartSummary> ParseRestartJson(const std::string& text) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  auto bad = [&] {
    return absl::DataLossError(absl::StrCat("a restart event's detail is not a restart: ", text));
  };
  if (!doc.is_object() || !doc.contains("instance") || !doc["instance"].is_string() ||
      !doc.contains("notice_ms") || !doc["notice_ms"].is_number()) {
    return bad();
  }
  RestartSummary r{.instance = doc["instance"].get<std::string>(),
                   .cause = doc.value("cause", ""),
                   .notice_ms = doc["notice_ms"].get<int64_t>(),
                   .steps_at_notice = doc.value("steps_at_notice", 0.0)};
  if (doc.contains("stepping_s") && doc["stepping_s"].is_number()) {
    r.stepping_s = doc["stepping_s"].get<double>();
  }
  if (doc.contains("steps_redone") && doc["steps_redone"].is_number()) {
    r.steps_redone = doc["steps_redone"].get<double>();
  }
  r.resumed_step = doc.value("resumed_step", int64_t{0});
  return r;
}

absl::StatusOr<std::vector<RestartSummary>> RestartsOf(const std::vector<JobEventRecord>& events) {
  std::vector<RestartSummary> out;
  for (const JobEventRecord& e : events) {
    if (e.kind != "restart" && e.kind != "restarted") continue;
    auto restart = ParseRestartJson(e.detail);
    if (!restart.ok()) return restart.status();
    auto same = std::find_if(out.begin(), out.end(), [&](const RestartSummary& r) {
      return r.instance == restart->instance && r.notice_ms == restart->notice_ms;
    });
    if (same == out.end()) {
      out.push_back(*std::move(restart));
    } else {
      *same = *std::move(restart);
    }
  }
  return out;
}

bool TargetReached(const JobRecord& job, const JobSpec& spec) {
  if (job.loss > 0 && spec.target_loss > 0) return job.loss <= spec.target_loss;
  return job.target_iterations > 0 && job.iterations_done >= job.target_iterations;
}

JudgedTarget JudgeTarget(const JobRecord& job, const JobSpec& spec) {
  JudgedTarget t;
  const bool steps_known = job.target_iterations > 0;
  auto by_steps = [&](std::string kind, std::string target) {
    t.kind = std::move(kind);
    t.target = std::move(target);
    t.measure = "global steps done";
    t.measured = job.iterations_done;
    if (steps_known) t.reached = job.iterations_done >= job.target_iterations;
  };
  if (spec.target_loss > 0) {
    t.kind = "loss";
    t.target = absl::StrFormat("loss <= %g", spec.target_loss);
    if (job.loss > 0) {
      t.measure = "the workers' smoothed loss";
      t.measured = job.loss;
      t.reached = job.loss <= spec.target_loss;
    } else {
      t.measure = "no loss reported (the job ran to its predicted global steps)";
    }
  } else if (spec.target_metric.has_value()) {
    const spotdnn::v1::MetricTarget& m = *spec.target_metric;
    t.kind = m.metric();
    t.target = absl::StrFormat(
        "%s %s %g", m.metric(),
        m.direction() == spotdnn::v1::MetricTarget::DIRECTION_AT_MOST ? "<=" : ">=", m.value());
    // The metric is not measured while the job runs: it ran to the predicted global steps.
    t.measure = absl::StrFormat(
        "not measured while the job runs; it ran to the predicted %.0f global steps",
        job.target_iterations);
    t.measured = std::nullopt;
  } else if (spec.target_epochs > 0) {
    by_steps("epochs",
             absl::StrFormat("%g epochs of %g samples (%.0f global steps)", spec.target_epochs,
                             spec.dataset_size, job.target_iterations));
  } else {
    by_steps("iterations", absl::StrFormat("%.0f global steps", job.target_iterations));
  }
  return t;
}

std::string TargetDescription(const JobRecord& job, const JobSpec& spec) {
  const JudgedTarget t = JudgeTarget(job, spec);
  if (t.kind == "loss" && t.measured) {
    return absl::StrFormat("the workers' smoothed loss %.4g %s %g", *t.measured,
                           *t.reached ? "<=" : ">", spec.target_loss);
  }
  return absl::StrFormat("%.0f of %.0f global steps", job.iterations_done, job.target_iterations);
}

std::vector<std::pair<std::string, double>> ParseWorkerLosses(const std::string& text) {
  std::vector<std::pair<std::string, double>> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const size_t eq = part.rfind('=');
    double v = 0;
    if (eq != absl::string_view::npos && absl::SimpleAtod(part.substr(eq + 1), &v)) {
      out.emplace_back(std::string(part.substr(0, eq)), v);
    }
  }
  return out;
}

}  // namespace spotdnn::job
#include "spotdnn/v1/common.pb.h"

namespace spotdnn::job {

absl::StatusOr<JobSummary> SummarizeJob(JobStore& store, const std::string& job_id,
                                        int64_t now_ms) {
  auto job = store.GetJob(job_id);
  if (!job.ok()) return job.status();
  auto spec = ParseJobSpec(job->spec_json);
  if (!spec.ok()) return spec.status();
  auto instances = store.Instances(job_id);
  if (!instances.ok()) return instances.status();
  auto revocations = store.Revocations(job_id);
  if (!revocations.ok()) return revocations.status();
  auto events = store.Events(job_id);
  if (!events.ok()) return events.status();

  JobSummary s{.job_id = job->id,
               .state = job->state,
               .message = job->message,
               .target_loss = spec->target_loss,
               .deadline_s = spec->deadline_s,
               .budget_usd = spec->budget_usd,
               .target_iterations = job->target_iterations,
               .iterations_done = job->iterations_done,
               .predicted_time_s = job->predicted_time_s,
               .predicted_cost_usd = job->predicted_cost_usd};
  spotdnn::v1::Plan first;
  if (google::protobuf::util::JsonStringToMessage(job->plan_json, &first).ok()) {
    s.first_plan_iterations = first.prediction().normalized_iterations();
    s.first_plan_time_s = first.time_s();
    s.first_plan_cost_usd = first.cost_usd();
    s.on_demand_only_cost_usd = first.on_demand_cost_usd() > 0
                                    ? first.on_demand_cost_usd()
                                    : first.prediction().on_demand_cost_usd();
    if (spec->confidence > 0 && first.has_risk()) {
      s.predicted_p_meet_deadline = first.risk().p_meet_deadline();
      s.predicted_p_meet_deadline_low = first.risk().p_meet_deadline_low();
      s.predicted_p_meet_deadline_high = first.risk().p_meet_deadline_high();
    }
  }
  s.confidence = spec->confidence;
  for (const JobEventRecord& e : *events) {
    s.deadline_decisions += e.kind == "deadline";
    if (e.kind != "move") continue;
    const nlohmann::json move = nlohmann::json::parse(e.detail, nullptr, false);
    if (!move.is_object()) continue;
    ++s.moves;
    s.move_cost_usd += move.value("cost_usd", 0.0);
    s.move_list.push_back(absl::StrFormat("%s -> %s (%s, $%.4f)", move.value("from", "?"),
                                          move.value("to", "?"), move.value("instance", "?"),
                                          move.value("cost_usd", 0.0)));
  }
  auto restarts = RestartsOf(*events);
  if (!restarts.ok()) return restarts.status();
  s.restarts = *std::move(restarts);
  const int64_t end = job->finished_ms > 0 ? job->finished_ms : now_ms;
  for (const InstanceRecord& i : *instances) {
    const int64_t stop = i.ended_ms > 0 ? i.ended_ms : end;
    const double hours = std::max<int64_t>(0, stop - i.launched_ms) / 3.6e6;
    s.actual_cost_usd += i.price_per_hour * hours;
    if (i.market == launcher::Market::kOnDemand) {
      s.on_demand_instance_hours += hours;
      s.on_demand_cost_usd += i.price_per_hour * hours;
      ++s.on_demand_instances;
    } else {
      s.spot_instance_hours += hours;
      s.spot_cost_usd += i.price_per_hour * hours;
    }
    ++s.instances_launched;
    s.takeover_instances += i.reason == LaunchReason::kTakeover;
  }
  s.actual_time_s = job->started_ms > 0 ? (end - job->started_ms) / 1000.0 : 0;
  s.profiling_s = job->profiling_s;
  if (s.profiling_s == 0 && job->profiling_started_ms > 0 && job->state == JobState::kProfiling) {
    s.profiling_s = (end - job->profiling_started_ms) / 1000.0;  // under way
  }
  s.profiling_cost_usd = job->profiling_cost_usd;
  s.actual_cost_usd += job->profiling_cost_usd;
  for (const RevocationRecord& r : *revocations) {
    s.revocations_handled +=
        r.status == RevocationStatus::kLaunched || r.status == RevocationStatus::kNoneNeeded;
    RevocationSummary out{.instance = r.instance_id,
                          .status = r.status,
                          .takeover = r.takeover_ids,
                          .notice_ms = r.cloud_notice_ms > 0 ? r.cloud_notice_ms : r.received_ms,
                          .received_ms = r.received_ms,
                          .replanned_ms = r.replanned_ms,
                          .takeover_running_ms = r.takeover_launched_ms,
                          .takeover_first_report_ms = r.takeover_reported_ms,
                          .revoked_instance_ended_ms = r.ended_ms,
                          .detail = r.detail};
    if (r.takeover_launched_ms > 0) {
      out.notice_to_takeover_running_s = (r.takeover_launched_ms - out.notice_ms) / 1000.0;
    }
    if (r.takeover_reported_ms > 0) {
      out.notice_to_takeover_training_s = (r.takeover_reported_ms - out.notice_ms) / 1000.0;
    }
    // A parameter server's replacement starts from the checkpoint it writes as it goes, so by
    // design after it: the question is a worker's.
    const bool server = std::any_of(instances->begin(), instances->end(), [&](const auto& i) {
      return i.id == r.instance_id && i.role == launcher::Role::kParameterServer;
    });
    if (r.takeover_launched_ms > 0 && r.ended_ms > 0 && !server) {
      out.takeover_before_revoked_ended = r.takeover_launched_ms < r.ended_ms;
    }
    s.revocations.push_back(std::move(out));
  }
  if (job->loss > 0) {
    s.final_loss = job->loss;
    s.loss_smoothing = kLossSmoothingName;
    s.worker_last_losses = ParseWorkerLosses(job->worker_losses);
  }
  const JudgedTarget judged = JudgeTarget(*job, *spec);
  s.target_kind = judged.kind;
  s.target = judged.target;
  s.target_measure = judged.measure;
  s.target_measured = judged.measured;
  s.target_reached = judged.reached;
  if (spec->target_loss > 0) s.loss_reached = judged.reached;
  s.steps_lost = job->steps_lost;
  s.deadline_met = spec->deadline_s == 0 || s.profiling_s + s.actual_time_s <= spec->deadline_s;
  s.budget_met = spec->budget_usd == 0 || s.actual_cost_usd <= spec->budget_usd;
  if (!s.deadline_met || !s.budget_met || s.target_reached == false) {
    s.slo_met = false;
  } else if (s.target_reached) {
    s.slo_met = true;
  }
  s.on_track = OnTrack(s.iterations_done, s.actual_time_s, s.target_iterations, s.predicted_time_s);
  return s;
}

}  // namespace spotdnn::job
