// How the CLI shows a job: its events as a line for a person or a JSON object (`spotdnn run`),
// and its summary as tables or JSON (`spotdnn run`, `jobs`, `status`).
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_JOB_OUTPUT_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_JOB_OUTPUT_H_

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "services/gateway/job/convergence_watch.h"
#include "services/gateway/job/job_events.h"
#include "services/gateway/job/job_store.h"
#include "services/gateway/job/job_summary.h"

namespace spotdnn::gateway {

// One line for a person; empty for events shown otherwise (the end: the summary follows).
std::string EventLine(const job::JobEvent& event);
// One JSON object: "event" (its kind), "at_unix_ms", "job_id" and the event's fields.
std::string EventJson(const job::JobEvent& event);

// The summary as one JSON object.
std::string SummaryJson(const job::JobSummary& summary);
// The summary as tables: predicted vs actual, instances, revocations, SLO met.
void PrintSummary(const job::JobSummary& summary, std::ostream& out);

// The live refit's forecasts of a job (its log's "forecast" events): the first one (from the
// profile) and the latest; each absent when the log has none (a job without a loss target or a
// loss model, or one run before the refit). Unreadable events are skipped.
struct JobForecasts {
  std::optional<job::ConvergenceForecast> first, current;
};
JobForecasts ForecastsOf(const std::vector<job::JobEventRecord>& events);
// Them as one JSON object ("first", "current": steps and finish p10/p50/p90, points, workers;
// null when absent) with the job's `iterations_done` and `deadline_s`.
std::string ForecastsJson(const JobForecasts& forecasts, double iterations_done, double deadline_s);
// An event log entry's detail as the status table shows it: a forecast or a refit re-plan (JSON in
// the log) in a few words, any other as it is.
std::string EventDetailText(const job::JobEventRecord& event);
// Them as a table beside the iterations done; nothing when there is no forecast.
void PrintForecasts(const JobForecasts& forecasts, double iterations_done, double deadline_s,
                    std::ostream& out);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_JOB_OUTPUT_H_
