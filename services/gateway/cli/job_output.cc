#include "services/gateway/cli/job_output.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "services/gateway/cli/output.h"

namespace spotdnn::gateway {
namespace {

using namespace ::spotdnn::job;  // NOLINT: the event types

std::string Counts(const std::vector<TypeCount>& counts) {
  std::vector<std::string> parts;
  for (const TypeCount& c : counts) parts.push_back(absl::StrCat(c.instance_type, "=", c.count));
  return absl::StrJoin(parts, ",");
}

int64_t Ms(absl::Time t) { return absl::ToUnixMillis(t); }

// The kind of an event, as the JSON's "event" says it.
std::string KindOf(const JobEvent& event) {
  return std::visit(
      [](const auto& e) -> std::string {
        using E = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<E, EndedEvent>) {
          return std::string(Name(e.state));
        } else {
          return E::kKind;
        }
      },
      event.what);
}

// "607 (p10 577, p90 637)" global steps; "never" when unreachable.
std::string Interval(double p10, double p50, double p90, int decimals) {
  if (!std::isfinite(p50)) return "never";
  auto one = [decimals](double v) { return std::isfinite(v) ? Fixed(v, decimals) : "never"; };
  return absl::StrCat(one(p50), " (p10 ", one(p10), ", p90 ", one(p90), ")");
}

std::string ForecastLine(const ForecastEvent& e) {
  const std::string deadline =
      e.deadline_s > 0 ? absl::StrFormat("; deadline %.0f s", e.deadline_s) : "";
  const std::string says =
      absl::StrCat(Interval(e.iterations_p10, e.iterations_p50, e.iterations_p90, 0),
                   " global steps, finish at ",
                   Interval(e.finish_p10_s, e.finish_p50_s, e.finish_p90_s, 1), " s", deadline);
  if (e.prior) return absl::StrCat("Forecast from the plan's model: ", says);
  if (e.source == "re-plan") {
    return absl::StrCat("Forecast for the re-planned cluster (step ", Fixed(e.step, 0), ", ",
                        Plural(e.workers, "worker", "workers"), "; the current model): ", says,
                        " (first forecast ", Fixed(e.first_iterations_p50, 0), ")");
  }
  return absl::StrCat("Refit (", e.points, " points, step ", Fixed(e.step, 0), ", ",
                      Plural(e.workers, "worker", "workers"),
                      "): ", Interval(e.iterations_p10, e.iterations_p50, e.iterations_p90, 0),
                      " global steps (first forecast ", Fixed(e.first_iterations_p50, 0),
                      "), finish at ", Interval(e.finish_p10_s, e.finish_p50_s, e.finish_p90_s, 1),
                      " s", deadline);
}

struct LineOf {
  const JobEvent& event;
  std::string operator()(const ProfilingEvent& e) const {
    if (!e.fitted_profile.empty()) return absl::StrCat("Fitted profile ", e.fitted_profile);
    if (!e.run.empty() && e.in_progress) {
      return absl::StrFormat(
          "[%6.1fs] profiling run %s: %d/%d steps (%.1f%%), %s so far%s", e.elapsed_s, e.run,
          e.steps_done, e.steps_total,
          e.steps_total > 0 ? 100.0 * e.steps_done / e.steps_total : 0.0, Dollars(e.cost_usd),
          e.eta_s ? absl::StrCat(", about ", HumanDuration(*e.eta_s), " left") : "");
    }
    if (!e.run.empty()) {
      return absl::StrCat(
          e.run_done ? "Profiling run " : "Profiling run ", e.run,
          e.run_done ? " done: " : " launched: ", Counts(e.cluster), ", ", e.steps, " steps each",
          e.elapsed_s > 0
              ? absl::StrFormat(" (profiling: %.1f s, %s so far)", e.elapsed_s, Dollars(e.cost_usd))
              : "");
    }
    return absl::StrCat("Imported ", e.imported_log);
  }
  std::string operator()(const PlannedEvent& e) const {
    return absl::StrFormat(
        "Plan for %s: %s, %s global steps, predicted %.1f s and $%.4f (%s)%s", event.job_id,
        Counts(e.cluster), Fixed(e.target_iterations, 0), e.predicted_time_s, e.predicted_cost_usd,
        e.strategy,
        e.p_meet_deadline >= 0
            ? absl::StrFormat("; meets the deadline in %.1f%% of %d simulated runs",
                              100 * e.p_meet_deadline, e.simulated_runs)
            : "");
  }
  std::string operator()(const LaunchedEvent& e) const {
    return absl::StrCat("Launched ", Plural(e.instances, "instance", "instances"), " (",
                        Plural(e.parameter_servers, "parameter server", "parameter servers"),
                        " and ", Plural(e.workers, "worker", "workers"), ") on ", e.provider);
  }
  std::string operator()(const CapacityEvent& e) const {
    std::vector<std::string> types;
    for (const TypeCount& c : e.running) {
      types.push_back(absl::StrCat(c.instance_type, " (", c.count, " running)"));
    }
    return absl::StrCat("No capacity for ", absl::StrJoin(types, ", "),
                        ": re-planning without more");
  }
  std::string operator()(const ReplannedEvent& e) const {
    const std::string launch = e.to_launch.empty() ? "nothing" : Counts(e.to_launch);
    if (e.refit) {
      if (!e.feasible)
        return absl::StrCat("A re-plan after the convergence refit could not help: ", e.detail);
      return absl::StrCat("Re-planned after the convergence refit (", e.detail, "): ",
                          absl::StrFormat("launch %s, %s more global steps in a predicted %.1f s",
                                          launch, Fixed(e.more_iterations, 0), e.predicted_time_s));
    }
    if (e.instance.empty()) {
      return absl::StrFormat(
          "Re-planned around the missing capacity: launch %s; predicted %.1f s "
          "and $%.4f",
          launch, e.predicted_time_s, e.predicted_cost_usd);
    }
    return absl::StrCat("Re-planned in ", e.replan_ms, " ms: launch ", launch,
                        e.feasible
                            ? absl::StrFormat(", %s more global steps in a predicted %.1f s",
                                              Fixed(e.more_iterations, 0), e.predicted_time_s)
                            : absl::StrCat(" (", e.detail, ")"));
  }
  std::string operator()(const NoticeEvent& e) const {
    if (e.kind == "lost") {
      // Gone without a notice (killed, taken away), or silent past the detector's heartbeats.
      return absl::StrCat(
          e.parameter_server ? "Parameter server " : "Instance ", e.instance, " (", e.instance_type,
          ") lost without a notice",
          e.parameter_server ? ": replacing it from its checkpoint" : ": re-planning");
    }
    return absl::StrCat(
        "Revocation ", e.kind, " for ", e.parameter_server ? "parameter server " : "", e.instance,
        " (", e.instance_type,
        e.effective != absl::InfinitePast()
            ? absl::StrFormat(", goes in %.1f s", absl::ToDoubleSeconds(e.effective - event.at))
            : "",
        e.parameter_server ? "): replacing it from its checkpoint" : "): re-planning");
  }
  std::string operator()(const TakeoverEvent& e) const {
    if (e.takeover.empty()) {
      return absl::StrCat("Not replacing ", e.instance,
                          e.detail.empty()
                              ? std::string(": no takeover needed")
                              : absl::StrCat(": ", absl::StripPrefix(e.detail, "not replaced: ")));
    }
    return absl::StrCat("Takeover ", absl::StrJoin(e.takeover, ","), " running for ", e.instance,
                        ", ", e.notice_to_running_ms, " ms after the notice");
  }
  std::string operator()(const TakeoverFailedEvent& e) const {
    return absl::StrCat("Takeover for ", e.instance, " failed: ", e.error);
  }
  std::string operator()(const RestartedEvent& e) const {
    const RestartSummary& r = e.restart;
    return absl::StrFormat(
        "All ranks stepping again %.1f s after the %s of %s: resumed at step %d, %s steps "
        "redone",
        r.stepping_s.value_or(0),
        r.cause == "lost"      ? "loss"
        : r.cause == "revoked" ? "revocation"
                               : r.cause,
        r.instance, r.resumed_step, Fixed(r.steps_redone.value_or(0), 0));
  }
  std::string operator()(const InstanceEndedEvent& e) const {
    return absl::StrCat("Instance ", e.instance, " (", e.instance_type, ") stopped",
                        e.command_end.empty() ? "" : ": its command ended with ", e.command_end);
  }
  std::string operator()(const ProgressEvent& e) const {
    // Against the job's current prediction of its global steps: its forecast (the plan's model,
    // refitted to the job's measurements) when it has one, saying what made it; else the plan's
    // until exceeded, then re-predicted from the measured loss (the plan's kept beside it); "?"
    // when nothing predicts the end.
    double predicted = 0;
    std::vector<std::string> notes;
    if (e.predicted_by == "forecast") {
      predicted = e.forecast_unreachable ? 0 : e.predicted_iterations;
      const std::string by = e.forecast_source == "refit"
                                 ? absl::StrCat("refit at step ", Fixed(e.forecast_step, 0))
                             : e.forecast_source == "re-plan"
                                 ? absl::StrCat("re-planned at step ", Fixed(e.forecast_step, 0))
                                 : std::string("the plan's model");
      if (predicted > 0) {
        notes.push_back(absl::StrFormat("%.1f%%", 100 * e.iterations_done / predicted));
        notes.push_back(absl::StrCat("forecast: ", by));
      } else {
        notes.push_back(absl::StrCat("the forecast (", by, ") does not reach the target"));
      }
      if (predicted > 0 && std::abs(e.first_plan_iterations - predicted) > 0.5) {
        notes.push_back(absl::StrCat("first plan ", Fixed(e.first_plan_iterations, 0)));
      }
    } else {
      predicted = e.predicted_iterations > 0                 ? e.predicted_iterations
                  : e.iterations_done <= e.target_iterations ? e.target_iterations
                                                             : 0;
      if (predicted > 0)
        notes.push_back(absl::StrFormat("%.1f%%", 100 * e.iterations_done / predicted));
      if (predicted == 0) {
        notes.push_back(absl::StrCat("the plan's ", Fixed(e.target_iterations, 0),
                                     " exceeded; no end predicted yet"));
      } else if (std::abs(predicted - e.target_iterations) > 0.5) {
        notes.push_back(absl::StrCat("re-predicted from the measured loss; the plan's ",
                                     Fixed(e.target_iterations, 0)));
      }
      // After a re-plan the first plan's is named beside the current plan's.
      if (std::abs(e.first_plan_iterations - e.target_iterations) > 0.5) {
        notes.push_back(
            absl::StrCat("current plan, first plan ", Fixed(e.first_plan_iterations, 0)));
      }
    }
    return absl::StrFormat(
        "[%6.1fs] %s/%s global steps (%s)%s, %s so far%s, %s running%s%s%s", e.elapsed_s,
        Fixed(e.iterations_done, 0), predicted > 0 ? Fixed(predicted, 0) : "?",
        absl::StrJoin(notes, "; "),
        e.loss ? absl::StrFormat(", loss %.4g%s", *e.loss,
                                 e.target_loss > 0 ? absl::StrFormat(" (target %g)", e.target_loss)
                                                   : std::string())
               : "",
        Dollars(e.cost_usd),
        e.eta_s ? absl::StrCat(", about ", HumanDuration(*e.eta_s), " left") : "",
        Plural(e.workers_running, "worker", "workers"),
        e.workers_revoking > 0 ? absl::StrCat(", ", e.workers_revoking, " revoking") : "",
        e.steps_lost > 0 ? absl::StrFormat(" (%.0f step%s lost to takeovers)", e.steps_lost,
                                           e.steps_lost == 1 ? "" : "s")
                         : "",
        !e.deadline_in_s ? ""
        : *e.deadline_in_s >= 0
            ? absl::StrCat(", deadline in ", HumanDuration(*e.deadline_in_s))
            : absl::StrCat(", deadline passed ", HumanDuration(-*e.deadline_in_s), " ago"));
  }
  std::string operator()(const ForecastEvent& e) const { return ForecastLine(e); }
  std::string operator()(const WarningEvent& e) const { return "Warning: " + e.message; }
  std::string operator()(const MovedEvent& e) const {
    return absl::StrFormat("Moved: %s (%s) runs in %s, not %s%s; the move costs $%.4f", e.instance,
                           e.instance_type, e.to, e.from,
                           e.across_regions ? " (another region: the checkpoint is copied)" : "",
                           e.cost_usd);
  }
  std::string operator()(const DeadlineEvent& e) const {
    std::vector<std::string> acts;
    if (e.launch_spot > 0) {
      acts.push_back(e.probe ? absl::StrCat("probing spot with ", e.launch_spot, " launch",
                                            e.launch_spot == 1 ? "" : "es")
                             : absl::StrCat("launching ", e.launch_spot, " on spot"));
    }
    if (e.launch_on_demand > 0) {
      acts.push_back(absl::StrCat("launching ", e.launch_on_demand, " on-demand"));
    }
    if (e.stop_on_demand > 0) {
      acts.push_back(e.launch_spot > 0
                         ? absl::StrCat("stopping ", e.stop_on_demand, " on-demand once spot runs")
                         : absl::StrCat("stopping ", e.stop_on_demand, " on-demand"));
    }
    if (e.kept_on_demand > 0) {
      acts.push_back(absl::StrCat("keeping ", e.kept_on_demand,
                                  " on-demand running until spot covers the workers wanted"));
    }
    return absl::StrCat("Deadline (", e.trigger, ") ", e.instance_type, ": running spot ",
                        e.running_spot, ", on-demand ", e.running_on_demand,
                        "; the policy wants spot ", e.spot, ", on-demand ", e.on_demand, " (",
                        e.probe ? "if the probe finds spot: " : "", e.reason, "; ",
                        HumanDuration(e.time_left_s), " left, ", HumanDuration(e.work_left_s),
                        " of work)", acts.empty() ? "" : ": " + absl::StrJoin(acts, ", "));
  }
  std::string operator()(const DeadlineDoneEvent& e) const {
    std::vector<std::string> parts;
    if (e.spot_refused) {
      parts.push_back(e.probe ? "the spot probe was refused (no capacity)"
                              : "spot launch refused (no capacity)");
    } else if (e.launched_spot > 0) {
      parts.push_back(absl::StrCat(e.launched_spot, " launched on spot"));
    }
    if (e.launched_on_demand > 0) {
      parts.push_back(absl::StrCat(e.launched_on_demand, " launched on-demand"));
    }
    if (e.stopped_on_demand > 0) {
      parts.push_back(absl::StrCat(e.stopped_on_demand, " on-demand stopped"));
    }
    std::string line =
        absl::StrCat("Deadline ", e.instance_type, ": ",
                     parts.empty() ? "nothing to change" : absl::StrJoin(parts, ", "),
                     "; running spot ", e.running_spot, ", on-demand ", e.running_on_demand);
    if (e.spot_refused && e.next_probe_in_s > 0) {
      absl::StrAppend(&line, "; next spot probe in ", HumanDuration(e.next_probe_in_s));
    }
    return line;
  }
  std::string operator()(const ResumedEvent& e) const {
    return absl::StrCat("Resumed job ", event.job_id, " with ",
                        Plural(e.instances, "instance", "instances"), " on record");
  }
  std::string operator()(const EndedEvent&) const { return ""; }
};

// A restart's fields, in an event and in the summary's list.
void RestartFields(JsonObject& o, const RestartSummary& r) {
  o.String("instance", r.instance)
      .String("cause", r.cause)
      .Integer("notice_unix_ms", r.notice_ms)
      .Number("steps_at_notice", r.steps_at_notice)
      .Number("stepping_s", r.stepping_s.value_or(NAN))
      .Number("steps_redone", r.steps_redone.value_or(NAN))
      .Integer("resumed_step", r.resumed_step);
}

struct JsonOf {
  JsonObject& o;
  void operator()(const ProfilingEvent& e) const {
    if (!e.fitted_profile.empty()) {
      o.String("profile", e.fitted_profile);
    } else if (!e.run.empty()) {
      o.String("run", e.run)
          .String("cluster", Counts(e.cluster))
          .Integer("steps", e.steps)
          .Bool("done", e.run_done)
          .Bool("in_progress", e.in_progress)
          .Integer("steps_done", e.steps_done)
          .Integer("steps_total", e.steps_total)
          .Number("elapsed_s", e.elapsed_s)
          .Number("cost_usd", e.cost_usd)
          .Number("eta_s", e.eta_s.value_or(NAN));
    } else {
      o.String("log", e.imported_log);
    }
  }
  void operator()(const PlannedEvent& e) const {
    o.String("cluster", Counts(e.cluster))
        .Number("target_iterations", e.target_iterations)
        .Number("predicted_time_s", e.predicted_time_s)
        .Number("predicted_cost_usd", e.predicted_cost_usd)
        .String("strategy", e.strategy)
        .Number("p_meet_deadline", e.p_meet_deadline >= 0 ? e.p_meet_deadline : NAN);
  }
  void operator()(const LaunchedEvent& e) const {
    o.Integer("instances", e.instances)
        .Integer("parameter_servers", e.parameter_servers)
        .Integer("workers", e.workers)
        .String("provider", e.provider);
  }
  void operator()(const CapacityEvent& e) const { o.String("types", Counts(e.running)); }
  void operator()(const ReplannedEvent& e) const {
    o.String("reason", e.refit ? "refit" : e.instance.empty() ? "capacity" : "revocation");
    if (!e.instance.empty()) o.String("instance", e.instance);
    o.Bool("feasible", e.feasible)
        .String("to_launch", Counts(e.to_launch))
        .Number("predicted_time_s", e.predicted_time_s)
        .Number("predicted_cost_usd", e.predicted_cost_usd);
    if (e.refit) o.Number("more_iterations", e.more_iterations);
    if (!e.instance.empty()) {
      o.Number("more_iterations", e.more_iterations)
          .Number("remaining_time_s", e.remaining_time_s)
          .Integer("replan_ms", e.replan_ms);
    }
    if (!e.detail.empty()) o.String("detail", e.detail);
  }
  void operator()(const NoticeEvent& e) const {
    o.String("instance", e.instance)
        .String("instance_type", e.instance_type)
        .String("kind", e.kind)
        .Bool("parameter_server", e.parameter_server)
        .Integer("effective_unix_ms", e.effective != absl::InfinitePast() ? Ms(e.effective) : 0);
  }
  void operator()(const TakeoverEvent& e) const {
    o.String("instance", e.instance)
        .String("takeover", absl::StrJoin(e.takeover, ","))
        .Integer("notice_to_takeover_ms", e.notice_to_running_ms);
    if (!e.detail.empty()) o.String("detail", e.detail);
  }
  void operator()(const TakeoverFailedEvent& e) const {
    o.String("instance", e.instance).String("error", e.error);
  }
  void operator()(const RestartedEvent& e) const { RestartFields(o, e.restart); }
  void operator()(const InstanceEndedEvent& e) const {
    o.String("instance", e.instance).String("instance_type", e.instance_type);
    if (!e.command_end.empty()) o.String("command_end", e.command_end);
  }
  void operator()(const ProgressEvent& e) const {
    o.Number("elapsed_s", e.elapsed_s)
        .Number("iterations_done", e.iterations_done)
        .Number("target_iterations", e.target_iterations)
        .Number("first_plan_iterations", e.first_plan_iterations)
        .Number("predicted_iterations", e.predicted_iterations > 0 ? e.predicted_iterations : NAN)
        .String("predicted_by", e.predicted_by)
        .String("forecast_source", e.forecast_source)
        .Number("forecast_step", e.predicted_by == "forecast" ? e.forecast_step : NAN)
        .Number("cost_usd", e.cost_usd)
        .Number("eta_s", e.eta_s.value_or(NAN))
        .Number("loss", e.loss.value_or(NAN))
        .Number("target_loss", e.target_loss > 0 ? e.target_loss : NAN)
        .Number("steps_lost", e.steps_lost)
        .Integer("workers_running", e.workers_running)
        .Integer("workers_revoking", e.workers_revoking)
        .Number("deadline_in_s", e.deadline_in_s.value_or(NAN));
  }
  void operator()(const ForecastEvent& e) const {
    o.Bool("prior", e.prior)
        .String("source", e.source)
        .Number("step", e.step)
        .Integer("points", e.points)
        .Integer("workers", e.workers)
        .Bool("reachable", e.reachable)
        .Number("iterations_p10", e.iterations_p10)
        .Number("iterations_p50", e.iterations_p50)
        .Number("iterations_p90", e.iterations_p90)
        .Number("finish_p10_s", e.finish_p10_s)
        .Number("finish_p50_s", e.finish_p50_s)
        .Number("finish_p90_s", e.finish_p90_s)
        .Number("first_iterations_p50", e.first_iterations_p50)
        .Number("deadline_s", e.deadline_s > 0 ? e.deadline_s : NAN);
  }
  void operator()(const MovedEvent& e) const {
    o.String("instance", e.instance)
        .String("instance_type", e.instance_type)
        .String("from", e.from)
        .String("to", e.to)
        .Bool("across_regions", e.across_regions)
        .Number("cost_usd", e.cost_usd);
  }
  void operator()(const WarningEvent& e) const {
    if (!e.instance.empty()) o.String("instance", e.instance);
    o.String("message", e.message);
  }
  void operator()(const ResumedEvent& e) const { o.Integer("instances", e.instances); }
  void operator()(const DeadlineDoneEvent& e) const {
    o.String("instance_type", e.instance_type)
        .Bool("probe", e.probe)
        .Bool("spot_refused", e.spot_refused)
        .Integer("launched_spot", e.launched_spot)
        .Integer("launched_on_demand", e.launched_on_demand)
        .Integer("stopped_on_demand", e.stopped_on_demand)
        .Integer("running_spot", e.running_spot)
        .Integer("running_on_demand", e.running_on_demand)
        .Number("next_probe_in_s", e.spot_refused ? e.next_probe_in_s : NAN);
  }
  void operator()(const DeadlineEvent& e) const {
    o.String("instance_type", e.instance_type)
        .Bool("probe", e.probe)
        .Integer("running_spot", e.running_spot)
        .Integer("running_on_demand", e.running_on_demand)
        .Integer("kept_on_demand", e.kept_on_demand)
        .String("trigger", e.trigger)
        .String("reason", e.reason)
        .Integer("spot", e.spot)
        .Integer("on_demand", e.on_demand)
        .Integer("launch_spot", e.launch_spot)
        .Integer("launch_on_demand", e.launch_on_demand)
        .Integer("stop_on_demand", e.stop_on_demand)
        .Number("time_left_s", e.time_left_s)
        .Number("work_left_s", e.work_left_s);
  }
  void operator()(const EndedEvent& e) const {
    if (!e.message.empty()) o.String("error", e.message);
    o.Raw("summary", SummaryJson(e.summary));
  }
};

// true, false, or null (not known).
std::string Tristate(const std::optional<bool>& v) { return v ? (*v ? "true" : "false") : "null"; }

std::string WorkerLossesJson(const std::vector<std::pair<std::string, double>>& losses) {
  JsonObject o;
  for (const auto& [worker, loss] : losses) o.Number(worker, loss);
  return o.str();
}

}  // namespace

std::string EventLine(const JobEvent& event) { return std::visit(LineOf{event}, event.what); }

std::string EventJson(const JobEvent& event) {
  JsonObject o;
  o.String("event", KindOf(event))
      .Integer("at_unix_ms", Ms(event.at))
      .String("job_id", event.job_id);
  std::visit(JsonOf{o}, event.what);
  return o.str();
}

std::string SummaryJson(const JobSummary& s) {
  std::vector<std::string> restarts;
  for (const RestartSummary& r : s.restarts) {
    JsonObject o;
    RestartFields(o, r);
    restarts.push_back(o.str());
  }
  std::vector<std::string> revocations;
  for (const RevocationSummary& r : s.revocations) {
    JsonObject o;
    o.String("instance", r.instance)
        .String("status", std::string(Name(r.status)))
        .String("takeover", r.takeover)
        .Integer("notice_unix_ms", r.notice_ms)
        .Integer("received_unix_ms", r.received_ms)
        .Integer("replanned_unix_ms", r.replanned_ms)
        .Integer("takeover_running_unix_ms", r.takeover_running_ms)
        .Integer("takeover_first_report_unix_ms", r.takeover_first_report_ms)
        .Integer("revoked_instance_ended_unix_ms", r.revoked_instance_ended_ms);
    if (r.notice_to_takeover_running_s) {
      o.Number("notice_to_takeover_running_s", *r.notice_to_takeover_running_s);
    }
    if (r.notice_to_takeover_training_s) {
      o.Number("notice_to_takeover_training_s", *r.notice_to_takeover_training_s);
    }
    if (r.takeover_before_revoked_ended) {
      o.Bool("takeover_before_revoked_ended", *r.takeover_before_revoked_ended);
    }
    if (!r.detail.empty()) o.String("detail", r.detail);
    revocations.push_back(o.str());
  }
  auto optional = [](double v) { return v > 0 ? v : NAN; };  // null when not set
  return JsonObject()
      .String("job_id", s.job_id)
      .String("state", std::string(Name(s.state)))
      .Number("target_loss", optional(s.target_loss))
      .Number("deadline_s", optional(s.deadline_s))
      .Number("budget_usd", optional(s.budget_usd))
      .Number("first_plan_iterations", s.first_plan_iterations)
      .Number("first_plan_time_s", s.first_plan_time_s)
      .Number("first_plan_cost_usd", s.first_plan_cost_usd)
      .Number("target_iterations", s.target_iterations)
      .Number("iterations_done", s.iterations_done)
      .Number("final_loss", s.final_loss.value_or(NAN))
      .String("loss_smoothing", s.loss_smoothing)
      .Raw("worker_last_losses", WorkerLossesJson(s.worker_last_losses))
      .Number("steps_lost", s.steps_lost)
      .Number("predicted_time_s", s.predicted_time_s)
      .Number("actual_time_s", s.actual_time_s)
      .Number("predicted_cost_usd", s.predicted_cost_usd)
      .Number("actual_cost_usd", s.actual_cost_usd)
      .Number("profiling_s", s.profiling_s)
      .Number("profiling_cost_usd", s.profiling_cost_usd)
      .Number("spot_instance_hours", s.spot_instance_hours)
      .Number("spot_cost_usd", s.spot_cost_usd)
      .Number("on_demand_instance_hours", s.on_demand_instance_hours)
      .Number("on_demand_cost_usd", s.on_demand_cost_usd)
      .Integer("on_demand_instances", s.on_demand_instances)
      .Number("on_demand_only_cost_usd", optional(s.on_demand_only_cost_usd))
      .Integer("deadline_decisions", s.deadline_decisions)
      .Integer("moves", s.moves)
      .Number("move_cost_usd", s.move_cost_usd)
      .Raw("move_list", nlohmann::json(s.move_list).dump())
      .Integer("instances_launched", s.instances_launched)
      .Integer("takeover_instances", s.takeover_instances)
      .Integer("revocations", static_cast<long long>(s.revocations.size()))
      .Integer("revocations_handled", s.revocations_handled)
      .Raw("revocation_list", "[" + absl::StrJoin(revocations, ",") + "]")
      .Raw("restarts", "[" + absl::StrJoin(restarts, ",") + "]")
      .String("target_kind", s.target_kind)
      .String("target", s.target)
      .String("target_measure", s.target_measure)
      .Number("target_measured", s.target_measured.value_or(NAN))
      .Raw("target_reached", Tristate(s.target_reached))
      .Raw("loss_reached", Tristate(s.loss_reached))
      .Bool("deadline_met", s.deadline_met)
      .Number("confidence", s.confidence > 0 ? s.confidence : NAN)
      .Number("predicted_p_meet_deadline", s.predicted_p_meet_deadline.value_or(NAN))
      .Number("predicted_p_meet_deadline_low",
              s.predicted_p_meet_deadline ? s.predicted_p_meet_deadline_low : NAN)
      .Number("predicted_p_meet_deadline_high",
              s.predicted_p_meet_deadline ? s.predicted_p_meet_deadline_high : NAN)
      .Bool("budget_met", s.budget_met)
      .Raw("slo_met", Tristate(s.slo_met))
      .Raw("on_track", IsDone(s.state) || s.state == job::JobState::kProfiling ? "null"
                       : s.on_track                                            ? "true"
                                                                               : "false")
      .str();
}

void PrintSummary(const JobSummary& s, std::ostream& out) {
  const bool replanned = std::abs(s.first_plan_iterations - s.target_iterations) > 0.5 ||
                         std::abs(s.first_plan_time_s - s.predicted_time_s) > 0.05;
  // "current": the job's current prediction (its forecast, or the last re-plan's) beside the first
  // plan's.
  Table table(replanned ? std::vector<std::string>{"", "first plan", "current", "actual"}
                        : std::vector<std::string>{"", "predicted", "actual"});
  auto row = [&](const std::string& what, const std::string& first, const std::string& current,
                 const std::string& actual) {
    table.AddRow(replanned ? std::vector<std::string>{what, first, current, actual}
                           : std::vector<std::string>{what, current, actual});
  };
  row("time", HumanDuration(s.first_plan_time_s), HumanDuration(s.predicted_time_s),
      HumanDuration(s.actual_time_s));
  row("cost", Dollars(s.first_plan_cost_usd), Dollars(s.predicted_cost_usd),
      Dollars(s.actual_cost_usd));
  row("global steps", Fixed(s.first_plan_iterations, 0), Fixed(s.target_iterations, 0),
      Fixed(s.iterations_done, 0));
  if (s.final_loss) {
    row("loss (smoothed)", Fixed(s.target_loss, 4), Fixed(s.target_loss, 4),
        Fixed(*s.final_loss, 4));
  } else if (s.target_loss > 0) {
    row("loss", Fixed(s.target_loss, 4), Fixed(s.target_loss, 4), "not measured");
  }
  if (s.profiling_s > 0 || s.profiling_cost_usd > 0) {
    // Before the run: its time is not in the time above (the deadline counts both), its cost is.
    row("profiling (before; cost included)", "-", "-",
        absl::StrCat(HumanDuration(s.profiling_s), ", ", Dollars(s.profiling_cost_usd)));
  }
  table.Print(out);
  if (s.steps_lost > 0) {
    out << "Steps lost to parameter-server takeovers: " << Fixed(s.steps_lost, 0) << "\n";
  }
  {
    // Spot and on-demand (the deadline guard's fallback) so far, beside on-demand from the start.
    Table markets({"market", "instance-hours", "cost"});
    markets.AddRow({"spot", Fixed(s.spot_instance_hours, 4), Dollars(s.spot_cost_usd)});
    markets.AddRow(
        {"on-demand", Fixed(s.on_demand_instance_hours, 4), Dollars(s.on_demand_cost_usd)});
    if (s.on_demand_only_cost_usd > 0) {
      markets.AddRow(
          {"(on-demand from the start, planned)", "-", Dollars(s.on_demand_only_cost_usd)});
    }
    markets.Print(out);
    if (s.deadline_decisions > 0) {
      out << "Deadline decisions: " << s.deadline_decisions << " (\"deadline\" in the event log)\n";
    }
    if (s.moves > 0) {
      out << "Moves between zones: " << s.moves << ", " << Dollars(s.move_cost_usd) << " ("
          << absl::StrJoin(s.move_list, "; ") << ")\n";
    }
  }
  out << "Instances launched: " << s.instances_launched << " (" << s.takeover_instances
      << " takeover); revocations handled: " << s.revocations_handled << " of "
      << s.revocations.size() << "\n";
  if (!s.revocations.empty()) {
    Table revocations({"revoked", "takeover", "notice -> takeover running", "-> training",
                       "takeover before it ended"});
    revocations.LeftAlign(1);
    auto seconds = [](const std::optional<double>& v) {
      return v ? absl::StrFormat("%.2f s", *v) : std::string("-");
    };
    for (const RevocationSummary& r : s.revocations) {
      revocations.AddRow(
          {r.instance, r.takeover.empty() ? "-" : r.takeover,
           seconds(r.notice_to_takeover_running_s), seconds(r.notice_to_takeover_training_s),
           r.takeover_before_revoked_ended ? (*r.takeover_before_revoked_ended ? "yes" : "NO")
                                           : "-"});
    }
    revocations.Print(out);
  }
  if (!s.restarts.empty()) {
    Table restarts({"restart for", "cause", "at step", "notice -> all ranks stepping", "resumed at",
                    "steps redone"});
    restarts.LeftAlign(1);
    for (const RestartSummary& r : s.restarts) {
      restarts.AddRow({r.instance, r.cause, Fixed(r.steps_at_notice, 0),
                       r.stepping_s ? absl::StrFormat("%.2f s", *r.stepping_s) : "under way",
                       r.resumed_step > 0 ? absl::StrCat(r.resumed_step) : "-",
                       r.steps_redone ? Fixed(*r.steps_redone, 0) : "-"});
    }
    restarts.Print(out);
  }
  if (s.final_loss) {
    std::vector<std::string> raw;
    for (const auto& [worker, loss] : s.worker_last_losses) {
      raw.push_back(absl::StrFormat("%s %.4g", worker, loss));
    }
    out << "Loss " << Fixed(*s.final_loss, 4) << ": " << s.loss_smoothing
        << (raw.empty() ? "" : "; last raw losses: " + absl::StrJoin(raw, ", ")) << "\n";
  } else if (s.target_loss > 0) {
    out << "Loss: not measured (no worker reported one); whether the target was reached is "
           "unknown\n";
  }
  auto yes = [](bool v) { return v ? "yes" : "NO"; };
  auto known = [&](const std::optional<bool>& v) { return v ? yes(*v) : "unknown"; };
  if (s.predicted_p_meet_deadline) {
    out << absl::StrFormat(
        "Predicted P(meet deadline): %.4f [%.4f, %.4f] (slo.confidence %g); deadline met: %s\n",
        *s.predicted_p_meet_deadline, s.predicted_p_meet_deadline_low,
        s.predicted_p_meet_deadline_high, s.confidence, yes(s.deadline_met));
  }
  if (s.state == job::JobState::kProfiling) {
    // No plan yet: there is no line to be on or behind.
    out << "Status: profiling (" << HumanDuration(s.profiling_s) << " so far, "
        << Dollars(s.profiling_cost_usd) << "); the plan comes after it" << std::endl;
    return;
  }
  if (!IsDone(s.state)) {
    // Not ended: nothing is met or missed yet; the plan's line says how it goes.
    out << "Status: " << Name(s.state) << ", " << (s.on_track ? "on track" : "behind")
        << " (the current prediction: " << Fixed(s.target_iterations, 0) << " global steps in "
        << HumanDuration(s.predicted_time_s) << ")" << std::endl;
    return;
  }
  if (!s.target.empty()) {
    out << "Target " << s.target << ": judged by " << s.target_measure
        << (s.target_measured && s.target_kind == "loss"
                ? absl::StrCat(" (", Fixed(*s.target_measured, 4), ")")
            : s.target_measured ? absl::StrCat(" (", Fixed(*s.target_measured, 0), ")")
                                : std::string())
        << "\n";
  }
  out << "Target reached: " << known(s.target_reached) << "; deadline met: " << yes(s.deadline_met)
      << "; budget met: " << yes(s.budget_met) << "; SLO met: " << known(s.slo_met) << std::endl;
}

JobForecasts ForecastsOf(const std::vector<job::JobEventRecord>& events) {
  JobForecasts out;
  for (const job::JobEventRecord& e : events) {
    if (e.kind != job::kForecastEvent) continue;
    auto f = job::ParseForecastJson(e.detail);
    if (!f.ok()) continue;
    if (!out.first.has_value()) out.first = *f;
    out.current = *f;
  }
  return out;
}

namespace {

std::string ForecastObject(const std::optional<job::ConvergenceForecast>& f) {
  if (!f.has_value()) return "null";
  return JsonObject()
      .Bool("prior", f->prior)
      .Number("elapsed_s", f->elapsed_s)
      .Number("step", f->step)
      .Integer("points", f->points)
      .Integer("workers", f->workers)
      .Number("steps_per_s", f->steps_per_s)
      .Bool("reachable", f->reachable)
      .Number("iterations_p10", f->iterations_p10)
      .Number("iterations_p50", f->iterations_p50)
      .Number("iterations_p90", f->iterations_p90)
      .Number("finish_p10_s", f->finish_p10_s)
      .Number("finish_p50_s", f->finish_p50_s)
      .Number("finish_p90_s", f->finish_p90_s)
      .Number("rmse", f->rmse)
      .str();
}

}  // namespace

std::string ForecastsJson(const JobForecasts& forecasts, double iterations_done,
                          double deadline_s) {
  return JsonObject()
      .Raw("first", ForecastObject(forecasts.first))
      .Raw("current", ForecastObject(forecasts.current))
      .Number("iterations_done", iterations_done)
      .Number("deadline_s", deadline_s > 0 ? deadline_s : NAN)
      .str();
}

std::string EventDetailText(const job::JobEventRecord& event) {
  if (event.kind == job::kForecastEvent) {
    auto f = job::ParseForecastJson(event.detail);
    if (!f.ok()) return event.detail;
    return absl::StrCat(
        f->prior ? "from the profile: " : "",
        f->prior ? "" : absl::StrCat(f->points, " points at step ", Fixed(f->step, 0), ": "),
        Interval(f->iterations_p10, f->iterations_p50, f->iterations_p90, 0), " steps, finish ",
        Interval(f->finish_p10_s, f->finish_p50_s, f->finish_p90_s, 1), " s");
  }
  if (event.kind == "refit-replan") {
    const nlohmann::json doc = nlohmann::json::parse(event.detail, nullptr, false);
    if (!doc.is_object()) return event.detail;  // an infeasible re-plan: its reason, as text
    return absl::StrCat(doc.value("why", std::string()), "; launch ",
                        doc.value("launch", std::string()), " for ",
                        Fixed(doc.value("iterations", 0.0), 0), " iterations");
  }
  return event.detail;
}

void PrintForecasts(const JobForecasts& forecasts, double iterations_done, double deadline_s,
                    std::ostream& out) {
  if (!forecasts.first.has_value()) return;
  Table table({"convergence forecast", "steps p50", "p10", "p90", "finish p50 (s)", "p10", "p90",
               "points"});
  auto cell = [](double v, int decimals) {
    return std::isfinite(v) ? Fixed(v, decimals) : std::string("never");
  };
  auto row = [&](const std::string& name, const job::ConvergenceForecast& f) {
    table.AddRow({name, cell(f.iterations_p50, 0), cell(f.iterations_p10, 0),
                  cell(f.iterations_p90, 0), cell(f.finish_p50_s, 1), cell(f.finish_p10_s, 1),
                  cell(f.finish_p90_s, 1), absl::StrCat(f.points)});
  };
  row("first (the plan's model)", *forecasts.first);
  if (forecasts.current.has_value() && !forecasts.current->prior) {
    row(absl::StrCat("current (", forecasts.current->source == "re-plan" ? "re-plan" : "refit",
                     " at step ", Fixed(forecasts.current->step, 0), ")"),
        *forecasts.current);
  }
  table.AddRow({"iterations done", Fixed(iterations_done, 0), "", "", "", "", "", ""});
  table.Print(out);
  if (deadline_s > 0) out << "Deadline: " << Fixed(deadline_s, 1) << " s from the job's start.\n";
}

}  // namespace spotdnn::gateway
