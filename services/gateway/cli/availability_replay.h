// The cluster form of `--availability TYPE=FILE,...` (`spotdnn plan` and `spotdnn simulate`): a
// plan's cluster replayed as one unit through its types' spot availability traces, and what the
// answer needs said beside it (types bought on-demand, types without a trace, a plan with no room
// for a changeover). Also the notes the one-instance form and the plain plan share.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_AVAILABILITY_REPLAY_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_AVAILABILITY_REPLAY_H_

#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "provisioner/deadline/availability_trace.h"
#include "provisioner/deadline/window_replay.h"
#include "services/common/data_registry.h"
#include "services/gateway/cli/args.h"
#include "spotdnn/v1/common.pb.h"
#include "spotdnn/v1/predictor.pb.h"

namespace spotdnn::gateway {

namespace pb = ::spotdnn::v1;

// The catalog a request names, when this process knows it (inline, built in or a file); nullopt
// for a name only a remote server knows.
std::optional<pb::InstanceCatalog> KnownCatalog(const pb::CatalogRef& ref,
                                                const services::DataRegistry& local);

// The flags of the cluster form.
struct ClusterAvailability {
  // TYPE (or TYPE@ZONE, when `zoned`) and its trace.
  std::vector<std::pair<std::string, provisioner::deadline::AvailabilityTrace>> traces;
  bool zoned = false;
  std::string fallback = "on-demand";  // or "none" (spot only)
  std::string policy = "ours";         // "spot-only" with --fallback none
  double changeover_s = 300;
  double every_s = 0;  // a window per this; 0: per deadline
};

// Reads --availability, --fallback, --policy (when `with_policy`), --changeover and --start-every.
// Every TYPE must be in `catalog` when it is known (INVALID_ARGUMENT naming --availability, the
// type and the nearest one, as --quota refuses an unknown type). TYPE@ZONE=FILE gives a type's
// trace in a zone: the cluster then runs in one zone at a time, moving when its zone runs dry.
absl::StatusOr<ClusterAvailability> ParseClusterAvailability(const Args& args,
                                                             const pb::InstanceCatalog* catalog,
                                                             bool with_policy);

// How the replayed plan came about: the hints for a plan without room differ.
enum class PlanOrigin {
  kPlanned,     // the cheapest plan for the deadline (it uses the whole deadline)
  kGiven,       // --cluster
  kOneInstance  // simulate --availability FILE --work ...
};

// A plan's cluster replayed under one policy.
struct ClusterReplay {
  provisioner::deadline::WindowJob job;  // work: the plan's time without its --overhead
  provisioner::deadline::ReplaySummary summary;
  std::vector<std::string> on_demand_types;  // spot dearer than on-demand: bought on-demand
  std::vector<std::string> untraced_types;   // no trace given: spot assumed always there
  std::vector<std::string> notes;            // for people, one line each
  bool zoned = false;                        // replayed through zones (TYPE@ZONE traces)
};

// Replays `plan` (feasible, with its time and costs) under `policy` through the traces of
// `availability`, the deadline `deadline_s`; `overhead_s` is the --overhead the plan's time
// includes. Types whose spot price is not below their on-demand price (from `catalog`, when known)
// are bought on-demand in every window and need no trace. INVALID_ARGUMENT when no type of the
// cluster has a trace (naming --availability) or a window does not fit (naming the flag).
absl::StatusOr<ClusterReplay> ReplayPlanCluster(const pb::Plan& plan, double deadline_s,
                                                double overhead_s,
                                                const ClusterAvailability& availability,
                                                absl::string_view policy,
                                                const pb::InstanceCatalog* catalog,
                                                PlanOrigin origin);

// Why a job of this work, deadline and changeover cannot meet the deadline in any window, or why
// `policy` never starts spot in it, with what would help; "" when neither.
std::string SlackNote(const provisioner::deadline::WindowJob& job, absl::string_view policy,
                      PlanOrigin origin);

// A note per type of `cluster` whose spot price is not below its on-demand price in `catalog`
// (the planner prices them at spot; on-demand would cost no more and is never revoked).
std::vector<std::string> SpotDearerNotes(const pb::Cluster& cluster,
                                         const pb::InstanceCatalog& catalog);

// The windows as a table (start, met, cost, spot h, on-demand h, changeovers, finish; with
// `zones`, the zones spot ran in and the moves between them) and as JSON.
void PrintWindows(const provisioner::deadline::ReplaySummary& summary, std::ostream& out,
                  bool zones = false);
std::string WindowsJson(const provisioner::deadline::ReplaySummary& summary, bool zones = false);
// A JSON array of strings.
std::string JsonStrings(const std::vector<std::string>& items);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_AVAILABILITY_REPLAY_H_
