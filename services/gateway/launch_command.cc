// `spotdnn local launch|list|revoke|terminate` (the local provider) and `spotdnn catalog refresh`
// (live spot prices from a cloud provider into a catalog).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "detector/metadata_emulator.h"
#include "provisioner/aws_provider.h"
#include "provisioner/cluster_launcher.h"
#include "provisioner/local_provider.h"
#include "services/gateway/cli.h"
#include "services/gateway/output.h"

namespace spotdnn::gateway {
namespace {

using launcher::Instance;
using launcher::InstanceStateName;
using launcher::LocalProvider;
using launcher::RoleName;

constexpr char kLocalUsage[] =
    R"(Usage: spotdnn local launch --job J --workers TYPE=N[,TYPE=N...] --command CMD
                           [--ps N] [--ps-type T] [--batch-size B] [--metadata-emulator URL]
                           [--timeout D] [--json]
       spotdnn local list [--job J] [--json]
       spotdnn local revoke INSTANCE [--notice 10s] [--json]
       spotdnn local terminate (INSTANCE... | --job J | --all) [--json]

The local provider runs each instance as a process group on this machine: CMD through /bin/sh -c
with SPOTDNN_JOB_ID, SPOTDNN_ROLE (ps|worker), SPOTDNN_INDEX, SPOTDNN_PS_ADDRESSES,
SPOTDNN_BATCH_SIZE, SPOTDNN_INSTANCE_TYPE, SPOTDNN_INSTANCE_ID and SPOTDNN_METADATA_ENDPOINT.

launch     starts the parameter servers (default 1, on free local ports) and the workers, then
           stays in the foreground until every instance has exited, --timeout passes, or it gets
           SIGINT/SIGTERM; it terminates what is left when it stops, and a reaper process kills
           the instances if it dies. Each instance gets an AWS-flavour metadata endpoint
           (SPOTDNN_METADATA_ENDPOINT) on a metadata emulator run in this process, or on the
           spotdnn-metadata-emulator at --metadata-emulator URL (endpoint URL/i/ID).
list       the instances in the state dir and whether they run.
revoke     publishes an AWS spot interruption notice on the instance's metadata endpoint and
           stops it --notice later (default 10s); waits until then.
terminate  stops instances now and forgets them.

State: $SPOTDNN_HOME/local (default ~/.spotdnn/local): one ID.instance file and ID.log per
instance.
)";

constexpr char kCatalogUsage[] =
    R"(Usage: spotdnn catalog refresh --provider aws [--catalog C] [--region R]
                              [--endpoint-url URL] [--profile P] [--out FILE] [--json]

Reads the current spot price of each of the catalog's instance types (and its parameter server
type) with EC2 DescribeSpotPriceHistory, takes the cheapest availability zone, and writes the
catalog with those prices to --out (without --out it only shows them).

  --catalog C         built-in catalog name or a JSON file (default aws-paper-2023)
  --region R          default: the catalog's region, else $AWS_REGION, else us-east-1
  --endpoint-url URL  another EC2 endpoint (other partitions, tests)
  --profile P         the shared credentials profile (default $AWS_PROFILE, else default)
Credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN], then
~/.aws/credentials, then the instance role. The IAM policy needs ec2:DescribeSpotPriceHistory.

       spotdnn catalog hazards --catalog C (--lifetimes FILE | --from-detector HOST:PORT) ...
Each type's revocation model from instance lifetimes, stored with the catalog (see
`spotdnn catalog hazards --help`).
)";

std::atomic<int> g_stop_signal{0};
void OnStopSignal(int sig) { g_stop_signal.store(sig); }

std::string InstancesJson(const std::vector<Instance>& instances) {
  std::vector<std::string> items;
  for (const Instance& i : instances) {
    items.push_back(JsonObject()
                        .String("id", i.id)
                        .String("job_id", i.job_id)
                        .String("role", std::string(RoleName(i.role)))
                        .Integer("index", i.index)
                        .String("instance_type", i.instance_type)
                        .String("state", std::string(InstanceStateName(i.state)))
                        .String("address", i.private_address)
                        .String("metadata_endpoint", i.metadata_endpoint)
                        .str());
  }
  return "[" + absl::StrJoin(items, ",") + "]";
}

void PrintInstances(const std::vector<Instance>& instances, std::ostream& out) {
  Table table({"instance", "job", "role", "index", "type", "state", "metadata endpoint"});
  for (size_t c : {1, 2, 4, 5, 6}) table.LeftAlign(c);
  for (const Instance& i : instances) {
    table.AddRow({i.id, i.job_id, std::string(RoleName(i.role)), absl::StrCat(i.index),
                  i.instance_type, std::string(InstanceStateName(i.state)),
                  i.metadata_endpoint.empty() ? "-" : i.metadata_endpoint});
  }
  table.Print(out);
}

absl::StatusOr<int> FreeLocalPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::InternalError("cannot find a free local port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

absl::StatusOr<std::unique_ptr<LocalProvider>> OpenLocal(bool owner,
                                                         const std::string& emulator_url) {
  LocalProvider::Options options{.state_dir = launcher::DefaultLocalStateDir(), .owner = owner};
  if (!emulator_url.empty()) {
    options.metadata = std::make_shared<launcher::EmulatorMetadataClient>(emulator_url);
  }
  return LocalProvider::Create(options);
}

int LocalLaunch(const Args& args, const Io& io) {
  auto job = args.Required("--job");
  if (!job.ok()) return ReportError(job.status(), "local launch", io);
  auto command = args.Required("--command");
  if (!command.ok()) return ReportError(command.status(), "local launch", io);
  auto workers_arg = args.Required("--workers");
  if (!workers_arg.ok()) return ReportError(workers_arg.status(), "local launch", io);
  auto workers = ParseCounts("--workers", *workers_arg);
  if (!workers.ok()) return ReportError(workers.status(), "local launch", io);
  int ps_count = 1;
  if (auto v = args.Get("--ps")) {
    auto n = ParseInt("--ps", *v, 0, 64);
    if (!n.ok()) return ReportError(n.status(), "local launch", io);
    ps_count = *n;
  }
  int batch_size = 0;
  if (auto v = args.Get("--batch-size")) {
    auto n = ParseInt("--batch-size", *v, 1, 1 << 24);
    if (!n.ok()) return ReportError(n.status(), "local launch", io);
    batch_size = *n;
  }
  double timeout_s = 0;
  if (auto v = args.Get("--timeout")) {
    auto d = ParseDuration("--timeout", *v);
    if (!d.ok()) return ReportError(d.status(), "local launch", io);
    timeout_s = *d;
  }
  // Without --metadata-emulator, an emulator runs in this process for as long as the instances.
  std::string emulator_url = args.Get("--metadata-emulator").value_or("");
  std::unique_ptr<detector::MetadataEmulator> emulator;
  if (emulator_url.empty()) {
    auto started = detector::MetadataEmulator::Start({.threads = 16});
    if (!started.ok()) return ReportError(started.status(), "local launch", io);
    emulator = std::move(*started);
    emulator_url = absl::StrCat("http://127.0.0.1:", emulator->port());
  }
  auto provider = OpenLocal(true, emulator_url);
  if (!provider.ok()) return ReportError(provider.status(), "local launch", io);

  std::vector<int> ps_ports;
  for (int i = 0; i < ps_count; ++i) {
    auto port = FreeLocalPort();
    if (!port.ok()) return ReportError(port.status(), "local launch", io);
    ps_ports.push_back(*port);
  }
  auto cluster = launcher::LaunchCluster(
      **provider, {.job_id = *job,
                   .command = *command,
                   .workers = *workers,
                   .parameter_servers = ps_count,
                   .parameter_server_type = args.Get("--ps-type").value_or("m5.xlarge"),
                   .local_ps_ports = ps_ports,
                   .batch_size = batch_size});
  if (!cluster.ok()) return ReportError(cluster.status(), "local launch", io);
  if (!cluster->complete()) {
    // The provider's destructor stops what did start: a failed launch leaves nothing running.
    absl::Status status = cluster->error;
    if (status.ok()) {
      std::vector<std::string> short_by;
      for (const auto& [type, n] : cluster->shortfall)
        short_by.push_back(absl::StrCat(type, "=", n));
      status = absl::ResourceExhaustedError(
          absl::StrCat("could not launch ", absl::StrJoin(short_by, ",")));
    }
    return ReportError(status, "local launch", io);
  }
  const std::vector<Instance>& launched = cluster->instances;
  if (io.json) {
    io.out << JsonObject()
                  .String("job_id", *job)
                  .String("state_dir", (*provider)->state_dir())
                  .Raw("instances", InstancesJson(launched))
                  .str()
           << std::endl;
  } else {
    io.out << "Launched job " << *job << " (" << launched.size() << " instances; state in "
           << (*provider)->state_dir() << "):\n";
    PrintInstances(launched, io.out);
    io.out << "Waiting for the instances to exit (Ctrl-C terminates them)." << std::endl;
  }

  g_stop_signal.store(0);
  struct sigaction action {
  }, old_int{}, old_term{};
  action.sa_handler = &OnStopSignal;
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  absl::Time deadline =
      timeout_s > 0 ? absl::Now() + absl::Seconds(timeout_s) : absl::InfiniteFuture();
  std::string why = "every instance exited";
  while (true) {
    auto described = (*provider)->Describe(*job);
    bool any_running = false;
    if (described.ok()) {
      for (const Instance& i : *described) {
        any_running = any_running || i.state == launcher::InstanceState::kRunning;
      }
    }
    if (!any_running) break;
    if (g_stop_signal.load() != 0) {
      why = absl::StrCat("signal ", g_stop_signal.load());
      break;
    }
    if (absl::Now() >= deadline) {
      why = "--timeout passed";
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::vector<std::string> ids;
  for (const Instance& i : launched) ids.push_back(i.id);
  absl::Status terminated = (*provider)->Terminate(ids);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  // NOT_FOUND: another `spotdnn local terminate` forgot some of them already; they are stopped.
  if (!terminated.ok() && !absl::IsNotFound(terminated)) {
    return ReportError(terminated, "local launch", io);
  }
  if (!io.json) io.out << "Job " << *job << " stopped: " << why << "." << std::endl;
  return kExitOk;
}

int LocalList(const Args& args, const Io& io) {
  auto provider = OpenLocal(false, "");
  if (!provider.ok()) return ReportError(provider.status(), "local list", io);
  auto instances = (*provider)->Describe(args.Get("--job").value_or(""));
  if (!instances.ok()) return ReportError(instances.status(), "local list", io);
  if (io.json) {
    io.out << JsonObject().Raw("instances", InstancesJson(*instances)).str() << "\n";
  } else if (instances->empty()) {
    io.out << "No local instances (state dir " << (*provider)->state_dir() << ").\n";
  } else {
    PrintInstances(*instances, io.out);
  }
  return kExitOk;
}

int LocalRevoke(const Args& args, const Io& io) {
  if (args.positional().size() != 1) {
    return ReportError(absl::InvalidArgumentError("give exactly one INSTANCE to revoke"),
                       "local revoke", io);
  }
  const std::string id = args.positional()[0];
  double notice_s = 10;
  if (auto v = args.Get("--notice")) {
    auto d = ParseDuration("--notice", *v);
    if (!d.ok()) return ReportError(d.status(), "local revoke", io);
    notice_s = *d;
  }
  auto provider = OpenLocal(false, "");
  if (!provider.ok()) return ReportError(provider.status(), "local revoke", io);
  absl::Time at = absl::Now() + absl::Seconds(notice_s);
  absl::Status s = (*provider)->Revoke(id, absl::Seconds(notice_s));
  if (!s.ok()) return ReportError(s, "local revoke", io);
  if (!io.json) {
    io.out << "Spot notice published for " << id << "; stopping it at "
           << absl::FormatTime("%H:%M:%S", at, absl::LocalTimeZone()) << "." << std::endl;
  }
  (*provider)->WaitForRevocations();
  if (io.json) {
    io.out << JsonObject()
                  .String("instance", id)
                  .String("action_time",
                          absl::FormatTime(absl::RFC3339_sec, at, absl::UTCTimeZone()))
                  .String("state", "terminated")
                  .str()
           << "\n";
  } else {
    io.out << id << " stopped." << std::endl;
  }
  return kExitOk;
}

int LocalTerminate(const Args& args, const Io& io) {
  auto provider = OpenLocal(false, "");
  if (!provider.ok()) return ReportError(provider.status(), "local terminate", io);
  std::vector<std::string> ids = args.positional();
  if (args.Has("--job") || args.Switch("--all")) {
    if (!ids.empty()) {
      return ReportError(
          absl::InvalidArgumentError("give instance ids, --job or --all, not several"),
          "local terminate", io);
    }
    auto instances = (*provider)->Describe(args.Get("--job").value_or(""));
    if (!instances.ok()) return ReportError(instances.status(), "local terminate", io);
    for (const Instance& i : *instances) ids.push_back(i.id);
  } else if (ids.empty()) {
    return ReportError(absl::InvalidArgumentError("give instance ids, --job J or --all"),
                       "local terminate", io);
  }
  absl::Status s = (*provider)->Terminate(ids);
  if (!s.ok()) return ReportError(s, "local terminate", io);
  if (io.json) {
    std::vector<std::string> quoted;
    for (const std::string& id : ids) quoted.push_back(JsonString(id));
    io.out << JsonObject().Raw("terminated", "[" + absl::StrJoin(quoted, ",") + "]").str() << "\n";
  } else {
    io.out << "Terminated " << ids.size() << " instance(s)"
           << (ids.empty() ? "" : ": " + absl::StrJoin(ids, " ")) << ".\n";
  }
  return kExitOk;
}

int CatalogRefresh(const Args& args, const Io& io) {
  const char* cmd = "catalog refresh";
  auto provider_name = args.Required("--provider");
  if (!provider_name.ok()) return ReportError(provider_name.status(), cmd, io);
  if (*provider_name != "aws") {
    return ReportError(absl::InvalidArgumentError(absl::StrCat(
                           "--provider = \"", *provider_name,
                           "\": only aws has a spot price API here (local has no prices)")),
                       cmd, io);
  }
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  const std::string catalog_arg = args.Get("--catalog").value_or("aws-paper-2023");
  auto catalog = registry.ResolveCatalog(catalog_arg);
  if (!catalog.ok()) return ReportError(catalog.status(), cmd, io);
  std::string region = args.Get("--region").value_or("");
  if (region.empty()) region = catalog->region();
  if (region.empty() && std::getenv("AWS_REGION") != nullptr) region = std::getenv("AWS_REGION");
  if (region.empty()) region = "us-east-1";

  auto credentials =
      launcher::ResolveAwsCredentials({.profile = args.Get("--profile").value_or("")});
  if (!credentials.ok()) return ReportError(credentials.status(), cmd, io);
  launcher::AwsProvider::Options options;
  options.region = region;
  options.endpoint_url = args.Get("--endpoint-url").value_or("");
  options.credentials = *credentials;
  auto aws = launcher::AwsProvider::Create(options);
  if (!aws.ok()) return ReportError(aws.status(), cmd, io);

  std::vector<std::string> types;
  for (const pb::InstanceType& t : catalog->instance_types()) types.push_back(t.name());
  const std::string ps_type = catalog->parameter_server().spot_price_per_hour() > 0
                                  ? catalog->parameter_server().instance_type()
                                  : "";
  if (!ps_type.empty()) types.push_back(ps_type);
  auto prices = (*aws)->SpotPrices(types, region);
  if (!prices.ok()) return ReportError(prices.status(), cmd, io);
  std::map<std::string, double> cheapest = launcher::CheapestPerType(*prices);
  std::map<std::string, std::string> zone;
  for (const launcher::SpotPrice& p : *prices) {
    if (cheapest[p.instance_type] == p.price_per_hour) zone[p.instance_type] = p.availability_zone;
  }

  Table table({"instance type", "old $/h", "new $/h", "zone"});
  table.LeftAlign(3);
  std::vector<std::string> json_rows;
  std::vector<std::string> missing;
  auto update = [&](const std::string& type, double old_price, auto set) {
    auto it = cheapest.find(type);
    if (it == cheapest.end()) {
      missing.push_back(type);
      table.AddRow({type, Fixed(old_price, 4), "(no price)", "-"});
      return;
    }
    set(it->second);
    table.AddRow({type, Fixed(old_price, 4), Fixed(it->second, 4), zone[type]});
    json_rows.push_back(JsonObject()
                            .String("instance_type", type)
                            .Number("old_price_per_hour", old_price)
                            .Number("spot_price_per_hour", it->second)
                            .String("availability_zone", zone[type])
                            .str());
  };
  for (pb::InstanceType& t : *catalog->mutable_instance_types()) {
    update(t.name(), t.spot_price_per_hour(), [&](double p) { t.set_spot_price_per_hour(p); });
  }
  // A parameter server priced at 0 is not counted in the catalog's cost model: leave it so.
  if (!ps_type.empty() && catalog->parameter_server().spot_price_per_hour() > 0) {
    pb::ParameterServer* ps = catalog->mutable_parameter_server();
    update(ps_type, ps->spot_price_per_hour(), [&](double p) { ps->set_spot_price_per_hour(p); });
  }
  catalog->set_prices_as_of(absl::FormatTime("%Y-%m-%dT%H:%MZ", absl::Now(), absl::UTCTimeZone()));
  catalog->set_region(region);

  std::string out_file = args.Get("--out").value_or("");
  if (!out_file.empty()) {
    std::ofstream out(out_file, std::ios::trunc);
    out << services::ToJson(*catalog, /*pretty=*/true) << "\n";
    if (!out) {
      return ReportError(absl::InvalidArgumentError(
                             absl::StrCat("--out = \"", out_file, "\": cannot write the file")),
                         cmd, io);
    }
  }
  if (io.json) {
    std::vector<std::string> quoted;
    for (const std::string& m : missing) quoted.push_back(JsonString(m));
    io.out << JsonObject()
                  .String("catalog", catalog->name())
                  .String("region", region)
                  .String("prices_as_of", catalog->prices_as_of())
                  .Raw("prices", "[" + absl::StrJoin(json_rows, ",") + "]")
                  .Raw("missing", "[" + absl::StrJoin(quoted, ",") + "]")
                  .String("out", out_file)
                  .str()
           << "\n";
  } else {
    io.out << "Spot prices for catalog " << catalog->name() << " in " << region
           << " (cheapest zone, Linux/UNIX):\n";
    table.Print(io.out);
    io.out << (out_file.empty() ? "Not saved (give --out FILE to write the catalog)."
                                : "Wrote " + out_file + ".")
           << "\n";
  }
  return kExitOk;
}

}  // namespace

absl::string_view LocalUsage() { return kLocalUsage; }
absl::string_view CatalogUsage() { return kCatalogUsage; }

int LocalCommand(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    (argv.empty() ? err : out) << kLocalUsage;
    return argv.empty() ? kExitBadInput : kExitOk;
  }
  const std::string sub = argv[0];
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  Io io{out, err, std::find(rest.begin(), rest.end(), "--json") != rest.end()};
  FlagSpec spec;
  if (sub == "launch") {
    spec = {.values = {"--job", "--workers", "--command", "--ps", "--ps-type", "--batch-size",
                       "--metadata-emulator", "--timeout"},
            .switches = {"--json"}};
  } else if (sub == "list") {
    spec = {.values = {"--job"}, .switches = {"--json"}};
  } else if (sub == "revoke") {
    spec = {.values = {"--notice"}, .switches = {"--json"}};
  } else if (sub == "terminate") {
    spec = {.values = {"--job"}, .switches = {"--json", "--all"}};
  } else {
    err << "spotdnn local: unknown subcommand \"" << sub << "\"\n\n" << kLocalUsage;
    return kExitBadInput;
  }
  auto args = Args::Parse(rest, spec);
  if (!args.ok()) {
    ReportError(args.status(), "local " + sub, io);
    err << kLocalUsage;
    return kExitBadInput;
  }
  if (sub == "launch") return LocalLaunch(*args, io);
  if (sub == "list") return LocalList(*args, io);
  if (sub == "revoke") return LocalRevoke(*args, io);
  return LocalTerminate(*args, io);
}

int CatalogCommand(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  if (!argv.empty() && argv[0] == "hazards") {
    const std::vector<std::string> rest(argv.begin() + 1, argv.end());
    Io io{out, err, std::find(rest.begin(), rest.end(), "--json") != rest.end()};
    if (!rest.empty() && (rest[0] == "--help" || rest[0] == "-h")) {
      out << HazardsUsage();
      return kExitOk;
    }
    auto args = Args::Parse(rest, {.values = {"--catalog", "--lifetimes", "--from-detector",
                                              "--censor-at", "--map", "--unmatched", "--out"},
                                   .switches = {"--json"}});
    if (!args.ok()) {
      ReportError(args.status(), "catalog hazards", io);
      err << HazardsUsage();
      return kExitBadInput;
    }
    return CatalogHazards(*args, io);
  }
  if (argv.empty() || argv[0] != "refresh") {
    (argv.empty() || argv[0] == "--help" || argv[0] == "-h" ? out : err) << kCatalogUsage;
    return !argv.empty() && (argv[0] == "--help" || argv[0] == "-h") ? kExitOk : kExitBadInput;
  }
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  Io io{out, err, std::find(rest.begin(), rest.end(), "--json") != rest.end()};
  auto args = Args::Parse(rest, {.values = {"--provider", "--catalog", "--region", "--endpoint-url",
                                            "--profile", "--out"},
                                 .switches = {"--json"}});
  if (!args.ok()) {
    ReportError(args.status(), "catalog refresh", io);
    err << kCatalogUsage;
    return kExitBadInput;
  }
  return CatalogRefresh(*args, io);
}

}  // namespace spotdnn::gateway
