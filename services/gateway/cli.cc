#include "services/gateway/cli.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/common/convert.h"
#include "services/common/server.h"
#include "services/gateway/output.h"
#include "services/predictor/predictor_service.h"

namespace spotdnn::gateway {
namespace {

constexpr char kUsage[] = R"(spotdnn — train deep networks on spot instances to a deadline and a loss

Usage: spotdnn COMMAND [FLAGS]

Commands:
  predict     time and cost for a cluster to reach a target loss
  catalogs    the instance catalogs known by name
  workloads   the workload profiles known by name
  watch       revocation events from a detector, as they arrive
  help        this text, or `spotdnn help COMMAND`

Every command takes --json (one JSON object on stdout) and --server HOST:PORT (use a running
service instead of the in-process one). Exit status: 0 ok, 1 service failure, 2 bad input,
3 infeasible SLO.
)";

constexpr char kPredictUsage[] = R"(Usage: spotdnn predict --workload W --catalog C --cluster TYPE=N[,TYPE=N...] --loss L
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

constexpr char kWatchUsage[] = R"(Usage: spotdnn watch [--server HOST:PORT] [--job J] [--after SEQ] [--count N]
                     [--timeout DURATION] [--json]

Prints a spotdnn-detector's revocation events (notice, rebalance, maintenance, revoked, lost,
recovered) as they arrive, one line each. If the stream breaks it resumes after the last event
printed, so none is missed.

  --server HOST:PORT   the detector (default 127.0.0.1:50054)
  --job J              only this job's events
  --after SEQ          replay events after this sequence number first (default: new ones only)
  --count N            stop after N events
  --timeout DURATION   stop after this long (e.g. 30s, 5m)
  --json               one JSON object per event, one per line
)";

constexpr char kListUsage[] = R"(Usage: spotdnn catalogs|workloads [--json] [--server HOST:PORT]
)";

// The predictor behind a command: a remote stub, or the service run in-process.
struct PredictorConnection {
  std::unique_ptr<services::PredictorServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<pb::Predictor::StubInterface> stub;
};

absl::StatusOr<PredictorConnection> ConnectPredictor(const Args& args) {
  PredictorConnection c;
  if (auto target = args.Get("--server")) {
    if (target->find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--server = \"", *target, "\": expected HOST:PORT"));
    }
    c.stub = pb::Predictor::NewStub(services::MakeChannel(*target));
    return c;
  }
  c.service = std::make_unique<services::PredictorServiceImpl>(
      std::make_shared<services::DataRegistry>(services::DataRegistry::WithBuiltins()));
  auto started = services::StartServer("", {c.service.get()});
  if (!started.ok()) return started.status();
  c.server = std::move(started->server);
  c.stub = pb::Predictor::NewStub(c.server->InProcessChannel(services::DefaultChannelArguments()));
  return c;
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
    table.AddRow({w.name(), w.dataset(), Fixed(w.parameter_size_mb(), 2),
                  Fixed(w.required_bandwidth_mb_per_s(), 1), absl::StrCat(w.compute_size()),
                  w.has_loss() ? "yes" : "no (fit one first)",
                  w.model_variant() == pb::MODEL_VARIANT_SPOTDNN_PROTOTYPE ? "spotdnn-prototype"
                                                                           : "paper"});
  }
  table.Print(io.out);
  return kExitOk;
}

}  // namespace

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

int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    (argv.empty() ? err : out) << kUsage;
    return argv.empty() ? kExitBadInput : kExitOk;
  }
  const std::string command = argv[0];
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  const bool wants_help = !rest.empty() && (rest[0] == "--help" || rest[0] == "-h");
  if (command == "help") {
    const std::string topic = rest.empty() ? "" : rest[0];
    out << (topic == "predict" ? kPredictUsage
            : topic == "watch" ? kWatchUsage
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
    const std::string target = args->Get("--server").value_or("127.0.0.1:50054");
    if (target.find(':') == std::string::npos) {
      return ReportError(absl::InvalidArgumentError(
                             absl::StrCat("--server = \"", target, "\": expected HOST:PORT")),
                         command, io);
    }
    auto stub = pb::Detector::NewStub(services::MakeChannel(target));
    return Watch(*args, *stub, io);
  }
  err << "spotdnn: unknown command \"" << command << "\"\n\n" << kUsage;
  return kExitBadInput;
}

}  // namespace spotdnn::gateway
