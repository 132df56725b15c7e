// How the CLI shows a job: its events as a line for a person or a JSON object (`spotdnn run`),
// and its summary as tables or JSON (`spotdnn run`, `jobs`, `status`).
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_JOB_OUTPUT_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_JOB_OUTPUT_H_

#include <ostream>
#include <string>

#include "services/gateway/job/job_events.h"
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

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_JOB_OUTPUT_H_
