#include "services/gateway/cli.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/common/convert.h"
#include "services/common/server.h"
#include "services/gateway/connection.h"
#include "services/gateway/output.h"
#include "services/gateway/risk_options.h"
#include "services/gateway/security_options.h"
#include "services/gateway/watch_command.h"
#include "services/predictor/predictor_service.h"
#include "services/provisioner/provisioner_service.h"

namespace spotdnn::gateway {
namespace {

constexpr char kUsage[] =
    R"(spotdnn — train deep networks on spot instances to a deadline and a loss

Usage: spotdnn COMMAND [FLAGS]

Commands:
  plan        the cheapest spot cluster that reaches a loss by a deadline (or budget, frontier);
              with --confidence Q the cheapest that meets the deadline with probability Q
  simulate    replay a job with sampled revocations: P(meet deadline), time and cost spread
  predict     time and cost for a cluster to reach a target loss
  catalogs    the instance catalogs known by name
  workloads   the workload profiles known by name
  profile     import training logs, fit, store and export workload profiles; validate-speed
  watch       revocation events from a detector, as they arrive
  run         run a job end to end: plan, launch, watch, take over revoked instances, summary
  jobs        the jobs run so far; status JOB shows one
  up, down    start or stop the four services (and the local metadata emulator) on this machine
  local       launch, list, revoke and terminate instances of the local provider (processes)
  catalog     refresh a catalog's spot prices from the cloud (catalog refresh --provider aws),
              or store revocation models in it (catalog hazards --lifetimes FILE)
  help        this text, or `spotdnn help COMMAND`

Every command takes --json (one JSON object on stdout) and --server HOST:PORT (use a running
service instead of the in-process one). Exit status: 0 ok, 1 service failure, 2 bad input,
3 infeasible SLO.

TLS and tokens, for any command that talks to a server: --tls-ca FILE (verify the server),
--tls-cert FILE --tls-key FILE (mutual TLS), --token-file FILE (bearer token); defaults from
$SPOTDNN_TLS_CA, $SPOTDNN_TLS_CERT, $SPOTDNN_TLS_KEY, $SPOTDNN_TOKEN_FILE.
)";

constexpr char kPredictUsage[] =
    R"(Usage: spotdnn predict --workload W --catalog C --cluster TYPE=N[,TYPE=N...] --loss L
                       [--parameter-servers N] [--curve POINTS] [--json] [--server HOST:PORT]

Predicts per-type iteration time, cluster speed, WA batch, convergence coefficient, normalized
iterations, time and spot/on-demand cost for the cluster to reach loss L.

  --workload W             built-in profile name (see `spotdnn workloads`) or a JSON file
  --catalog C              built-in catalog name (see `spotdnn catalogs`) or a JSON file
  --cluster TYPE=N,...     workers per instance type
  --loss L                 target training loss
  --parameter-servers N    parameter servers (their bandwidth adds up); default 1
  --curve POINTS           also print the predicted loss curve up to the target
  --json                   print one JSON object
  --server HOST:PORT       ask a running spotdnn-predictor instead of the in-process model
)";

constexpr char kPlanUsage[] = R"(Usage: spotdnn plan --workload W --catalog C --loss L --deadline D
                    [--mode deadline|budget|frontier] [--budget USD]
                    [--strategy exact|spotdnn|exhaustive] [--quota TYPE=N,...] [--existing TYPE=N,...]
                    [--on-demand] [--margin F] [--overhead D] [--max-size N] [--parameter-servers N]
                    [--exhaustive-limit N] [--plot FILE.svg] [--json] [--server HOST:PORT]
                    [--confidence Q] [--lifetimes FILE] [--runs N] [--seed S] [--notice D]
                    [--takeover-delay D] (see below)

Finds the cheapest cluster that reaches loss L by the deadline (deadline mode), the fastest
within a budget (budget mode), or every plan on the time/cost Pareto frontier (frontier mode),
and compares it with the spotDNN heuristic, the cheapest one-type plan and on-demand prices.

  --deadline D           2400, 2400s, 40m, 1.5h (optional in budget and frontier modes)
  --budget USD           most the job may cost (budget mode; bounds the frontier)
  --strategy S           exact (default, provably optimal under the model), spotdnn (the paper's
                         heuristic), exhaustive (every composition; refuses huge searches)
  --quota TYPE=N,...     per-type quota overrides (default: the catalog's quotas)
  --existing TYPE=N,...  instances already running: they stay in the plan and are paid for
  --on-demand            plan with on-demand prices
  --margin F             predict this fraction less PS bandwidth (e.g. 0.03)
  --overhead D           revocation overhead T_ohd added to the predicted time
  --max-size N           at most N workers
  --plot FILE.svg        with --mode frontier: write the frontier as an SVG chart (with a
                         revocation model: each plan coloured by its probability)
  --confidence Q         the plan with the least expected cost (takeovers included) whose
                         simulated probability of meeting the deadline is at least Q, e.g.
                         0.9; shown beside the plain plan and its probability. Needs a
                         revocation model: --lifetimes FILE, or the catalog's lifetimes or
                         interruption_rate_per_hour (spotdnn catalog hazards)
  With --lifetimes and no --confidence, the plan (deadline mode) or every frontier plan
  (frontier mode) is simulated and its probability shown.
Exit status: 0 a plan, 3 no plan meets the SLO (or the confidence), 2 bad input, 1 service
failure.
)";

constexpr char kWatchUsage[] = R"(Usage: spotdnn watch [--server HOST:PORT] [--job J] [--after SEQ] [--count N]
                     [--timeout DURATION] [--json]

Prints a spotdnn-detector's revocation events (notice, rebalance, maintenance, revoked, lost,
recovered) as they arrive, one line each. If the stream breaks it resumes after the last event
printed, so none is missed. It gives up (exit 1, naming the server) when the detector cannot be
reached within --timeout (or 10 s) at the start, or for 60 s after a stream broke; an --after
past the detector's newest event exits 2 naming both numbers.

  --server HOST:PORT   the detector (default 127.0.0.1:50054)
  --job J              only this job's events
  --after SEQ          replay events after this sequence number first (default: new ones only)
  --count N            stop after N events
  --timeout DURATION   stop after this long (e.g. 30s, 5m)
  --json               one JSON object per event, one per line
)";

constexpr char kListUsage[] = R"(Usage: spotdnn catalogs|workloads [--json] [--server HOST:PORT]
)";

absl::StatusOr<Connection<pb::Predictor, services::PredictorServiceImpl>> ConnectPredictor(
    const Args& args) {
  return Connect<pb::Predictor, services::PredictorServiceImpl>(args);
}

int ListCommand(const std::string& what, const Args& args, const Io& io) {
  auto connection = ConnectPredictor(args);
  if (!connection.ok()) return ReportError(connection.status(), what, io);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (what == "catalogs") {
    pb::ListCatalogsResponse response;
    auto s = services::FromGrpc(
        connection->stub->ListCatalogs(&context, pb::ListCatalogsRequest(), &response));
    if (!s.ok()) return ReportError(s, what, io);
    if (io.json) {
      io.out << services::ToJson(response) << "\n";
      return kExitOk;
    }
    Table table({"catalog", "provider", "region", "types", "prices as of", "instance types"});
    table.LeftAlign(1);
    table.LeftAlign(2);
    table.LeftAlign(5);
    for (const pb::InstanceCatalog& c : response.catalogs()) {
      std::vector<std::string> names;
      for (const pb::InstanceType& t : c.instance_types()) names.push_back(t.name());
      table.AddRow({c.name(), c.provider(), c.region(), absl::StrCat(c.instance_types_size()),
                    c.prices_as_of(), absl::StrJoin(names, " ")});
    }
    table.Print(io.out);
    return kExitOk;
  }
  pb::ListWorkloadsResponse response;
  auto s = services::FromGrpc(
      connection->stub->ListWorkloads(&context, pb::ListWorkloadsRequest(), &response));
  if (!s.ok()) return ReportError(s, what, io);
  if (io.json) {
    io.out << services::ToJson(response) << "\n";
    return kExitOk;
  }
  Table table({"workload", "dataset", "S_parm (MB)", "B_req (MB/s)", "compute entries",
               "loss model", "variant"});
  table.LeftAlign(1);
  table.LeftAlign(5);
  table.LeftAlign(6);
  for (const pb::WorkloadProfile& w : response.workloads()) {
    table.AddRow(
        {w.name(), w.dataset(), Fixed(w.parameter_size_mb(), 2),
         Fixed(w.required_bandwidth_mb_per_s(), 1), absl::StrCat(w.compute_size()),
         w.has_loss() ? "yes" : "no (fit one first)",
         w.model_variant() == pb::MODEL_VARIANT_SPOTDNN_PROTOTYPE ? "spotdnn-prototype" : "paper"});
  }
  table.Print(io.out);
  return kExitOk;
}

}  // namespace

// A workload named on the command line: a file goes inline, a name is resolved by the predictor.
absl::StatusOr<pb::WorkloadRef> WorkloadRefFor(const std::string& arg,
                                               const services::DataRegistry& local) {
  pb::WorkloadRef ref;
  if (services::LooksLikePath(arg)) {
    auto profile = local.ResolveWorkload(arg);
    if (!profile.ok()) return profile.status();
    *ref.mutable_profile() = *std::move(profile);
  } else {
    ref.set_name(arg);
  }
  return ref;
}

absl::StatusOr<pb::CatalogRef> CatalogRefFor(const std::string& arg,
                                             const services::DataRegistry& local) {
  pb::CatalogRef ref;
  if (services::LooksLikePath(arg)) {
    auto catalog = local.ResolveCatalog(arg);
    if (!catalog.ok()) return catalog.status();
    *ref.mutable_catalog() = *std::move(catalog);
  } else {
    ref.set_name(arg);
  }
  return ref;
}

int ReportError(const absl::Status& status, absl::string_view command, const Io& io) {
  io.err << "spotdnn " << command << ": " << absl::StatusCodeToString(status.code()) << ": "
         << status.message() << "\n";
  if (io.json) {
    io.out << "{\"error\":{\"code\":" << JsonString(absl::StatusCodeToString(status.code()))
           << ",\"message\":" << JsonString(std::string(status.message())) << "}}\n";
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kPermissionDenied:
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

int RunCli(const std::vector<std::string>& raw_argv, std::ostream& out, std::ostream& err) {
  // The security options apply to every command's channels; the commands never see them.
  std::vector<std::string> argv = raw_argv;
  if (absl::Status s = ApplySecurityOptions(argv); !s.ok()) {
    err << "spotdnn: " << s.message() << "\n";
    return kExitBadInput;
  }
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    (argv.empty() ? err : out) << kUsage;
    return argv.empty() ? kExitBadInput : kExitOk;
  }
  const std::string command = argv[0];
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  const bool wants_help = !rest.empty() && (rest[0] == "--help" || rest[0] == "-h");
  if (command == "help") {
    const std::string topic = rest.empty() ? "" : rest[0];
    if (topic == "profile") {
      out << ProfileUsage();
      return kExitOk;
    }
    if (topic == "run" || topic == "jobs" || topic == "status" || topic == "up" ||
        topic == "down") {
      out << (topic == "run"    ? RunUsage()
              : topic == "up" || topic == "down" ? UpUsage()
                                                 : JobsUsage());
      return kExitOk;
    }
    if (topic == "simulate") return SimulateCommand({"--help"}, out, err);
    if (topic == "local" || topic == "catalog") {
      out << (topic == "local" ? LocalUsage() : CatalogUsage());
      return kExitOk;
    }
    out << (topic == "predict"                            ? kPredictUsage
            : topic == "plan"                             ? std::string(kPlanUsage) + "\n" +
                                                                std::string(SimulationFlagsUsage())
            : topic == "watch"                            ? kWatchUsage
            : topic == "catalogs" || topic == "workloads" ? kListUsage
                                                          : kUsage);
    return kExitOk;
  }
  if (command == "predict") {
    if (wants_help) {
      out << kPredictUsage;
      return kExitOk;
    }
    auto args = Args::Parse(rest, {.values = {"--workload", "--catalog", "--cluster", "--loss",
                                              "--parameter-servers", "--curve", "--server"},
                                   .switches = {"--json"}});
    Io io{out, err, std::find(rest.begin(), rest.end(), "--json") != rest.end()};
    if (!args.ok()) {
      ReportError(args.status(), command, io);
      err << kPredictUsage;
      return kExitBadInput;
    }
    auto connection = ConnectPredictor(*args);
    if (!connection.ok()) return ReportError(connection.status(), command, io);
    const services::DataRegistry local = services::DataRegistry::WithBuiltins();
    return Predict(*args, *connection->stub, local, io);
  }
  if (command == "plan") {
    if (wants_help) {
      out << kPlanUsage << "\n" << SimulationFlagsUsage();
      return kExitOk;
    }
    FlagSpec spec{
        .values = {"--workload", "--catalog", "--loss", "--deadline", "--mode", "--budget",
                   "--strategy", "--quota", "--existing", "--margin", "--overhead", "--max-size",
                   "--parameter-servers", "--exhaustive-limit", "--plot", "--server",
                   "--confidence"},
        .switches = {"--json", "--on-demand"}};
    spec.values.insert(SimulationFlagNames().begin(), SimulationFlagNames().end());
    auto args = Args::Parse(rest, spec);
    Io io{out, err, std::find(rest.begin(), rest.end(), "--json") != rest.end()};
    if (!args.ok()) {
      ReportError(args.status(), command, io);
      err << kPlanUsage;
      return kExitBadInput;
    }
    auto connection = Connect<pb::Provisioner, services::ProvisionerServiceImpl>(*args);
    if (!connection.ok()) return ReportError(connection.status(), command, io);
    return Plan(*args, *connection->stub, services::DataRegistry::WithBuiltins(), io);
  }
  if (command == "catalogs" || command == "workloads") {
    if (wants_help) {
      out << kListUsage;
      return kExitOk;
    }
    auto args = Args::Parse(rest, {.values = {"--server"}, .switches = {"--json"}});
    Io io{out, err, args.ok() && args->Switch("--json")};
    if (!args.ok()) return ReportError(args.status(), command, io);
    return ListCommand(command, *args, io);
  }
  if (command == "profile") return ProfileCommand(rest, out, err);
  if (command == "watch") {
    if (wants_help) {
      out << kWatchUsage;
      return kExitOk;
    }
    auto args =
        Args::Parse(rest, {.values = {"--server", "--job", "--after", "--count", "--timeout"},
                           .switches = {"--json"}});
    Io io{out, err, std::find(rest.begin(), rest.end(), "--json") != rest.end()};
    if (!args.ok()) {
      ReportError(args.status(), command, io);
      err << kWatchUsage;
      return kExitBadInput;
    }
    const std::string target = args->Get("--server").value_or(std::string(kDefaultDetectorAddress));
    if (target.find(':') == std::string::npos) {
      return ReportError(absl::InvalidArgumentError(
                             absl::StrCat("--server = \"", target, "\": expected HOST:PORT")),
                         command, io);
    }
    auto stub = pb::Detector::NewStub(services::MakeChannel(target));
    return Watch(*args, *stub, io);
  }
  if (command == "local") return LocalCommand(rest, out, err);
  if (command == "run" || command == "jobs" || command == "status" || command == "up" ||
      command == "down") {
    return JobCommand(command, rest, out, err);
  }
  if (command == "catalog") return CatalogCommand(rest, out, err);
  if (command == "simulate") return SimulateCommand(rest, out, err);
  err << "spotdnn: unknown command \"" << command << "\"\n\n" << kUsage;
  return kExitBadInput;
}

}  // namespace spotdnn::gateway
