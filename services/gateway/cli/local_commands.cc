// `spotdnn local launch|list|revoke|terminate`: the local provider's instances by hand.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/text.h"
#include "detector/metadata_emulator.h"
#include "provisioner/launcher/aws_provider.h"
#include "provisioner/launcher/cluster_launcher.h"
#include "provisioner/launcher/local_provider.h"
#include "provisioner/launcher/provider_factory.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/output.h"
#include "services/gateway/cli/stack.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;

using launcher::Instance;
using launcher::InstanceStateName;
using launcher::LocalProvider;
using launcher::RoleName;

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

// The local provider over DATA_DIR/local, the folder `spotdnn run` launches local instances in.
absl::StatusOr<std::unique_ptr<LocalProvider>> OpenLocal(const Args& args, bool owner,
                                                         const std::string& emulator_url) {
  LocalProvider::Options options{
      .state_dir = (std::filesystem::path(DataDirOf(args)) / "local").string(), .owner = owner};
  if (owner) {
    // Launched commands run under the instance wrapper when it is beside this spotdnn (an
    // installed or built CLI); without it they run alone.
    options.bin_dir = SelfDir();
    if (access((fs::path(options.bin_dir) / "spotdnn-agent").c_str(), X_OK) == 0) {
      options.wrapper = launcher::kDefaultLocalWrapper;
    }
  }
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
  auto provider = OpenLocal(args, true, emulator_url);
  if (!provider.ok()) return ReportError(provider.status(), "local launch", io);

  std::vector<launcher::WorkerGroup> groups = launcher::ConsecutiveGroups(*workers);
  for (launcher::WorkerGroup& g : groups) g.batch_size = batch_size;
  auto cluster = launcher::LaunchCluster(
      **provider, {.job_id = *job,
                   .command = *command,
                   .parameter_servers = ps_count,
                   .parameter_server_type = args.Get("--ps-type").value_or("m5.xlarge"),
                   .workers = groups});
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
    io.out << "Launched job " << *job << " (" << Plural(launched.size(), "instance", "instances")
           << "; state in " << (*provider)->state_dir() << "):\n";
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
  auto provider = OpenLocal(args, false, "");
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
  auto provider = OpenLocal(args, false, "");
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
  auto provider = OpenLocal(args, false, "");
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
    io.out << "Terminated " << Plural(ids.size(), "instance", "instances")
           << (ids.empty() ? "" : ": " + absl::StrJoin(ids, " ")) << ".\n";
  }
  return kExitOk;
}

// The bytes under `path` (a file or a folder).
uintmax_t SizeOf(const fs::path& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return fs::file_size(path, ec);
  uintmax_t total = 0;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  }
  return total;
}

int LocalClean(const Args& args, const Io& io) {
  auto provider = OpenLocal(args, false, "");
  if (!provider.ok()) return ReportError(provider.status(), "local clean", io);
  auto instances = (*provider)->Describe("");
  if (!instances.ok()) return ReportError(instances.status(), "local clean", io);
  std::vector<std::string> running, exited;
  for (const Instance& i : *instances) {
    const bool ended = i.state == launcher::InstanceState::kTerminated ||
                       i.state == launcher::InstanceState::kStopped;
    (ended ? exited : running).push_back(i.id);
  }
  // A running job still writes its logs and reads its checkpoints: clean once nothing runs.
  if (!running.empty()) {
    return ReportError(absl::FailedPreconditionError(absl::StrCat(
                           Plural(running.size(), "local instance", "local instances"),
                           " still running (", absl::StrJoin(running, ", "),
                           "): stop them first (`spotdnn local terminate --all`), then clean")),
                       "local clean", io);
  }
  // The records of exited instances: terminate moves their output to logs/, removed below.
  if (!exited.empty()) {
    if (absl::Status s = (*provider)->Terminate(exited); !s.ok()) {
      return ReportError(s, "local clean", io);
    }
  }
  const fs::path data_dir = DataDirOf(args);
  std::vector<std::string> removed;
  uintmax_t bytes = 0;
  // The logs, the checkpoints, and each trace-driven job's trace time 0 (kept for its resume).
  std::vector<fs::path> paths = {fs::path((*provider)->OutputLocation()), data_dir / "checkpoints"};
  {
    std::error_code ec;
    for (auto it = fs::directory_iterator((*provider)->state_dir(), ec);
         !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name == "capacity_trace_origin" || absl::StartsWith(name, "capacity_trace_origin.")) {
        paths.push_back(it->path());
      }
    }
  }
  for (const fs::path& path : paths) {
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    bytes += SizeOf(path);
    fs::remove_all(path, ec);
    if (ec) {
      return ReportError(absl::UnavailableError(
                             absl::StrCat(path.string(), ": cannot be removed: ", ec.message())),
                         "local clean", io);
    }
    removed.push_back(path.string());
  }
  if (io.json) {
    std::vector<std::string> quoted;
    for (const std::string& r : removed) quoted.push_back(JsonString(r));
    io.out << JsonObject()
                  .Raw("removed", "[" + absl::StrJoin(quoted, ",") + "]")
                  .Integer("instances", static_cast<long long>(exited.size()))
                  .Integer("bytes", static_cast<long long>(bytes))
                  .str()
           << "\n";
  } else if (removed.empty() && exited.empty()) {
    io.out << "Nothing to clean in " << data_dir.string() << ".\n";
  } else {
    io.out << "Removed "
           << Plural(exited.size(), "exited instance's record", "exited instances' records")
           << (removed.empty() ? "" : ", " + absl::StrJoin(removed, ", ")) << " ("
           << base::FormatBytes(bytes) << ").\n";
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> LocalCommands() {
  return {
      {.name = "local",
       .summary =
           "launch, list, revoke, terminate and clean instances of the local provider (processes)",
       .description =
           "The local provider runs each instance as a process group on this machine: CMD through "
           "/bin/sh -c\nwith SPOTDNN_JOB_ID, SPOTDNN_ROLE (ps|worker), SPOTDNN_INDEX, "
           "SPOTDNN_PS_ADDRESSES,\nSPOTDNN_BATCH_SIZE, SPOTDNN_INSTANCE_TYPE, "
           "SPOTDNN_INSTANCE_ID and SPOTDNN_METADATA_ENDPOINT.\n\nState: DATA_DIR/local "
           "(--data-dir D, else $SPOTDNN_HOME, else ~/.spotdnn), where `spotdnn run`\n"
           "launches its local instances too: one ID.instance file and ID.log (the output) per "
           "running\ninstance; a terminated instance's output moves to "
           "DATA_DIR/local/logs/ID.log."},
      {.name = "local launch",
       .summary = "start parameter servers and workers; stay until they exit",
       .synopsis = "--job J --workers TYPE=N[,TYPE=N...] --command CMD [--ps N] [--ps-type T]\n"
                   "[--batch-size B] [--metadata-emulator URL] [--timeout D] [--json]\n"
                   "[--data-dir D]",
       .description =
           "Starts the parameter servers (default 1, each on a free local port) and the workers, "
           "then stays in\nthe foreground until every instance has exited, --timeout passes, or "
           "it gets SIGINT/SIGTERM; it\nterminates what is left when it stops, and a reaper "
           "process kills the instances if it dies.\nEach instance gets an AWS-flavour metadata "
           "endpoint (SPOTDNN_METADATA_ENDPOINT) on a metadata\nemulator run in this process, or "
           "on the spotdnn-metadata-emulator at --metadata-emulator URL\n(endpoint URL/i/ID).",
       .flags = {{"--job", "J", "the job the instances belong to"},
                 {"--workers", "TYPE=N,...", "workers per instance type"},
                 {"--command", "CMD", "what every instance runs (through /bin/sh -c)"},
                 {"--ps", "N", "parameter servers (default 1)"},
                 {"--ps-type", "T", "their instance type (default m5.xlarge)"},
                 {"--batch-size", "B", "per-worker batch size (SPOTDNN_BATCH_SIZE)"},
                 {"--metadata-emulator", "URL", "a running spotdnn-metadata-emulator"},
                 {"--timeout", "D", "stop after this long (e.g. 30m)"},
                 DataDirFlag()},
       .run = LocalLaunch},
      {.name = "local list",
       .summary = "the instances in the state dir and whether they run",
       .synopsis = "[--job J] [--json] [--data-dir D]",
       .flags = {{"--job", "J", "only this job's instances"}, DataDirFlag()},
       .run = LocalList},
      {.name = "local revoke",
       .summary = "publish a spot notice on an instance's metadata endpoint, stop it after it",
       .synopsis = "INSTANCE [--notice 10s] [--json] [--data-dir D]",
       .description = "Publishes an AWS spot interruption notice on the instance's metadata "
                      "endpoint and stops it\n--notice later (default 10s); waits until then.",
       .flags = {{"--notice", "D", "how long after the notice it stops (default 10s)"},
                 DataDirFlag()},
       .min_positional = 1,
       .max_positional = 1,
       .run = LocalRevoke},
      {.name = "local terminate",
       .summary = "stop instances now and forget them",
       .synopsis = "(INSTANCE... | --job J | --all) [--json] [--data-dir D]",
       .flags = {{"--job", "J", "every instance of this job"},
                 {"--all", "", "every instance in the state dir"},
                 DataDirFlag()},
       .max_positional = -1,
       .run = LocalTerminate},
      {.name = "local clean",
       .summary = "remove the logs and checkpoints kept after instances and jobs ended",
       .synopsis = "[--json] [--data-dir D]",
       .description =
           "Removes what the local provider and finished jobs keep in the data directory: the "
           "records of\nexited instances, their output (DATA_DIR/local/logs) and the parameter "
           "servers' checkpoints\n(DATA_DIR/checkpoints) and the trace time 0 of jobs that "
           "replayed a capacity trace\n(DATA_DIR/local/capacity_trace_origin.JOB). Refused while a "
           "local instance runs; a "
           "job you mean to resume\nneeds its checkpoints, so clean after it finished.",
       .flags = {DataDirFlag()},
       .run = LocalClean},
  };
}

}  // namespace spotdnn::gateway
