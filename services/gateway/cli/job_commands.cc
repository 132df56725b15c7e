// `spotdnn run`, `spotdnn jobs` and `spotdnn status`: the job controller's front end.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/db/database.h"
#include "provisioner/launcher/local_provider.h"
#include "provisioner/launcher/provider_factory.h"
#include "services/clients/service_clients.h"
#include "services/common/server.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/job_output.h"
#include "services/gateway/cli/loss_plot.h"
#include "services/gateway/cli/output.h"
#include "services/gateway/cli/stack.h"
#include "services/gateway/job/job_controller.h"
#include "services/gateway/job/job_lock_keeper.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using job::JobRecord;
using job::JobStore;

std::string Ms(int64_t unix_ms) {
  return unix_ms > 0
             ? absl::FormatTime("%H:%M:%E3S", absl::FromUnixMillis(unix_ms), absl::LocalTimeZone())
             : "-";
}

// Who this gateway is, for a second one refused the job: "pid 42 on host-a".
std::string GatewayName() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return absl::StrCat("pid ", getpid(), host[0] != '\0' ? absl::StrCat(" on ", host) : "");
}

// A resumed job whose instances are local processes (the local provider) can only be taken up
// where they run: from another host (or another --data-dir) the provider knows none of them and
// the gateway would take them all for lost and launch them again. FAILED_PRECONDITION saying
// so; OK when the job has no running instance or the provider knows one of them.
absl::Status CheckLocalInstancesAreHere(JobStore& store, launcher::CloudProvider& provider,
                                        const std::string& job_id, const std::string& data_dir) {
  if (!provider.SharesFilesWithCaller()) return absl::OkStatus();  // a cloud's: any host
  auto recorded = store.Instances(job_id);
  if (!recorded.ok()) return recorded.status();
  std::vector<std::string> running;
  for (const job::InstanceRecord& i : *recorded) {
    if (!i.id.empty() && i.state != job::InstanceStatus::kEnded) running.push_back(i.id);
  }
  if (running.empty()) return absl::OkStatus();
  auto here = provider.Describe(job_id);
  if (!here.ok()) return here.status();
  for (const launcher::Instance& i : *here) {
    if (std::find(running.begin(), running.end(), i.id) != running.end()) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("job \"", job_id, "\" runs on the local provider, and its running instances (",
                   absl::StrJoin(running, ", "),
                   ") are processes of the host that launched them, recorded in "
                   "its DATA_DIR/local; ",
                   (fs::path(data_dir) / "local").string(),
                   " here has none of them: resume it on that host with the same --data-dir"));
}

// The services a job runs against: named with flags, else the stack's (`spotdnn up`).
struct Endpoints {
  std::string provisioner, profiler, detector, emulator;
};

absl::StatusOr<Endpoints> EndpointsOf(const Args& args, const std::string& data_dir) {
  Endpoints e{.provisioner = args.Get("--provisioner").value_or(""),
              .profiler = args.Get("--profiler").value_or(""),
              .detector = args.Get("--detector").value_or(""),
              .emulator = args.Get("--metadata-emulator").value_or("")};
  if (e.provisioner.empty() || e.profiler.empty() || e.detector.empty()) {
    auto stack = ReadStack(data_dir);
    if (absl::IsNotFound(stack.status())) {
      // No service to run the job against: a service failure (exit 1), not bad input.
      return absl::UnavailableError(
          absl::StrCat("no spotdnn stack is up in ", data_dir,
                       ": start one with `spotdnn up` (same --data-dir), or name the services with "
                       "--provisioner, --profiler and --detector"));
    }
    if (!stack.ok()) return stack.status();
    if (e.provisioner.empty()) e.provisioner = stack->provisioner;
    if (e.profiler.empty()) e.profiler = stack->profiler;
    if (e.detector.empty()) e.detector = stack->detector;
    if (e.emulator.empty()) e.emulator = stack->emulator;
  }
  for (const auto& [flag, target] :
       {std::pair<const char*, std::string>{"--provisioner", e.provisioner},
        {"--profiler", e.profiler},
        {"--detector", e.detector}}) {
    if (target.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " = \"", target, "\": expected HOST:PORT"));
    }
  }
  return e;
}

absl::StatusOr<std::string> ReadSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("job spec \"", path, "\" cannot be read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The job store: --store SPEC (sqlite:PATH or postgres://…) or DATA_DIR/jobs.db.
absl::StatusOr<std::unique_ptr<JobStore>> OpenJobStore(const Args& args) {
  auto spec = db::ChosenStoreSpec(args.Get("--store").value_or(""), "--store",
                                  (fs::path(DataDirOf(args)) / "jobs.db").string());
  if (!spec.ok()) return spec.status();
  return JobStore::Open(*spec);
}

FlagHelp StoreFlag() {
  return {"--store", "SPEC",
          "the job store: sqlite:PATH or postgres://USER@HOST/DB (a libpq URI; the\npassword "
          "from PGPASSFILE, ~/.pgpass or PGPASSWORD; default DATA_DIR/jobs.db)"};
}

int Run(const Args& args, const Io& io) {
  const std::string data_dir = DataDirOf(args);
  const auto resume = args.Get("--resume");
  if (resume.has_value() == (args.positional().size() == 1)) {
    return ReportError(absl::InvalidArgumentError("give a job spec file, or --resume JOB"), "run",
                       io);
  }
  auto store = OpenJobStore(args);
  if (!store.ok()) return ReportError(store.status(), "run", io);
  absl::StatusOr<std::string> spec_json;
  if (resume) {
    auto job = (*store)->GetJob(*resume);
    if (!job.ok()) return ReportError(job.status(), "run", io);
    spec_json = job->spec_json;
  } else {
    spec_json = ReadSpecFile(args.positional()[0]);
  }
  if (!spec_json.ok()) return ReportError(spec_json.status(), "run", io);
  auto spec = job::ParseJobSpec(*spec_json);
  if (!spec.ok()) return ReportError(spec.status(), "run", io);
  // One gateway per job, held in the store (so across hosts on PostgreSQL) until this returns.
  auto lock = (*store)->HoldJob(spec->name, GatewayName());
  if (!lock.ok()) return ReportError(lock.status(), "run", io);
  absl::Duration stall_timeout = absl::Minutes(10);
  if (auto v = args.Get("--stall-timeout")) {
    auto d = ParseDuration("--stall-timeout", *v, /*allow_zero=*/true);
    if (!d.ok()) return ReportError(d.status(), "run", io);
    stall_timeout = absl::Seconds(*d);
  }
  job::GuardOptions guard;
  if (auto v = args.Get("--spot-probe-every")) {
    auto d = ParseDuration("--spot-probe-every", *v, /*allow_zero=*/false);
    if (!d.ok()) return ReportError(d.status(), "run", io);
    guard.probe_every = absl::Seconds(*d);
    guard.probe_max = std::max(guard.probe_max, guard.probe_every);
    // Checked at least as often as spot is probed.
    guard.check_every = std::min(guard.check_every, guard.probe_every);
  }
  auto endpoints = EndpointsOf(args, data_dir);
  if (!endpoints.ok()) return ReportError(endpoints.status(), "run", io);
  auto provisioner_stub = pb::Provisioner::NewStub(services::MakeChannel(endpoints->provisioner));
  auto profiler_stub = pb::Profiler::NewStub(services::MakeChannel(endpoints->profiler));
  auto detector_stub = pb::Detector::NewStub(services::MakeChannel(endpoints->detector));
  const clients::ProvisionerClient provisioner(*provisioner_stub);
  const clients::ProfilerClient profiler(*profiler_stub);
  const clients::DetectorClient detector(*detector_stub);
  // A capacity trace is replayed from its start for a new job; a resumed one continues where its
  // first run started it. (A spec naming a job that already ran is refused below: its trace time
  // stays as it was.)
  const bool ran_before = [&] {
    auto existing = (*store)->GetJob(spec->name);
    return existing.ok() && existing->started_ms != 0;
  }();
  const bool continue_trace = resume.has_value() || ran_before;
  // Local instances find the spotdnn binaries (spotdnn-agent, spotdnn-sim-worker) beside this one.
  auto provider = launcher::MakeProvider(
      spec->provider, {.local_state_dir = (fs::path(data_dir) / "local").string(),
                       .metadata_emulator = endpoints->emulator,
                       .bin_dir = SelfDir(),
                       .job_id = spec->name,
                       .resume = continue_trace});
  if (!provider.ok()) return ReportError(provider.status(), "run", io);
  if (!spec->provider.capacity_trace.empty() && !io.json && (resume || !ran_before)) {
    io.out << (resume ? "Capacity trace: continuing from the time this job's first run started "
                        "it (kept in "
                      : "Capacity trace: replayed from its start, now (the time is kept in ")
           << launcher::CapacityTraceOriginPath((fs::path(data_dir) / "local").string(), spec->name)
           << (resume ? ")." : " for --resume).") << std::endl;
  }
  if (resume) {
    if (absl::Status s = CheckLocalInstancesAreHere(**store, **provider, spec->name, data_dir);
        !s.ok()) {
      return ReportError(s, "run", io);
    }
  }

  job::JobController controller(
      {.provisioner = &provisioner,
       .profiler = &profiler,
       .detector = &detector,
       .provider = provider->get(),
       .store = store->get(),
       .read_checkpoint = spec->checkpoint_uri.empty()
                              ? launcher::CheckpointReader()
                              : launcher::MakeS3CheckpointReader(spec->provider),
       .copy_checkpoint = job::CheckpointsPerRegion(*spec)
                              ? launcher::MakeS3CheckpointCopier(spec->provider)
                              : launcher::CheckpointCopier()},
      {.profiler_address = endpoints->profiler,
       .detector_address = endpoints->detector,
       .stall_timeout = stall_timeout,
       .checkpoint_root = (fs::path(data_dir) / "checkpoints").string(),
       .guard = guard},
      [&io](const job::JobEvent& event) {
        if (io.json) {
          io.out << EventJson(event) << std::endl;
        } else if (std::string line = EventLine(event); !line.empty()) {
          io.out << line << std::endl;
        }
      });
  const std::string job_id = spec->name;
  job::JobLockKeeper keeper(
      *std::move(lock),
      // JobStore is thread-safe, and the lock takes a connection of its own.
      [&] { return (*store)->HoldJob(job_id, GatewayName()); },
      [&controller] { controller.Detach(); }, absl::Seconds(5));
  if (!resume) {
    auto planned = controller.Plan(*spec_json, services::DataRegistry::WithBuiltins());
    if (!planned.ok()) {
      const absl::Status& s = planned.status();
      ReportError(s, "run", io);
      return absl::IsFailedPrecondition(s)                           ? kExitInfeasible
             : absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ? kExitFailure
                                                                     : kExitBadInput;
    }
  }
  auto done = controller.Run(job_id);
  if (std::string lost = keeper.lost(); !lost.empty()) {
    ReportError(absl::AbortedError(absl::StrCat("this gateway lost job \"", job_id,
                                                "\"'s lock and stopped: ", lost)),
                "run", io);
    return kExitFailure;
  }
  if (!done.ok()) {
    ReportError(done.status(), "run", io);
    // A job that cannot go on as it is (cut off before its plan, not found, bad state) has no
    // resume to offer; a failure on the way (a service down) leaves its instances running.
    const absl::Status& s = done.status();
    if (!io.json && !absl::IsFailedPrecondition(s) && !absl::IsInvalidArgument(s) &&
        !absl::IsNotFound(s)) {
      io.err << "The job's instances keep running; resume with `spotdnn run --resume " << job_id
             << "`." << std::endl;
    }
    return kExitFailure;
  }
  if (!io.json) {
    io.out << "\nJob " << job_id << " " << job::Name(done->record.state)
           << (done->record.message.empty() ? "" : ": " + done->record.message) << "\n";
    PrintSummary(done->summary, io.out);
  }
  // A loss no worker measured leaves the SLO unknown (the summary says so): the job did what it
  // was asked as far as can be told, so not a failure's exit status.
  return done->record.state == job::JobState::kFinished && done->summary.slo_met.value_or(true)
             ? kExitOk
             : kExitInfeasible;
}

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

// Whether a gateway drives a job that has not ended: its lock in the store is held (by whom),
// or not (the gateway is gone), or the store cannot say.
struct Driver {
  bool known = false;
  bool alive = false;
  std::string holder;
};

Driver DriverOf(JobStore& store, const JobRecord& job) {
  if (job::IsDone(job.state)) return {};
  auto holder = store.JobHolder(job.id);
  if (!holder.ok()) return {};
  return {.known = true, .alive = holder->has_value(), .holder = holder->value_or("")};
}

std::string GatewayJson(const Driver& d, const JobRecord& job);

std::string ResumeCommand(const JobRecord& job) {
  return job.state == job::JobState::kProfiling ? "spotdnn run JOB.json (its profiling runs again)"
                                                : absl::StrCat("spotdnn run --resume ", job.id);
}

// {"driven": true|false|null, "holder": ..., "resume": command when none drives it}.
std::string GatewayJson(const Driver& d, const JobRecord& job) {
  JsonObject o;
  o.Raw("driven", !d.known ? "null" : d.alive ? "true" : "false");
  if (d.alive) o.String("holder", d.holder);
  if (d.known && !d.alive) o.String("resume", ResumeCommand(job));
  return o.str();
}

// The job's state as `jobs` lists it: "running", or "running (no gateway)" when none drives it.
std::string StateText(JobStore& store, const JobRecord& job) {
  const Driver d = DriverOf(store, job);
  return absl::StrCat(job::Name(job.state), d.known && !d.alive ? " (no gateway)" : "");
}

int Jobs(const Args& args, const Io& io) {
  auto store = OpenJobStore(args);
  if (!store.ok()) return ReportError(store.status(), "jobs", io);
  auto jobs = (*store)->ListJobs();
  if (!jobs.ok()) return ReportError(jobs.status(), "jobs", io);
  if (io.json) {
    std::vector<std::string> list;
    for (const JobRecord& j : *jobs) {
      auto summary = job::SummarizeJob(**store, j.id, NowMs());
      if (!summary.ok()) return ReportError(summary.status(), "jobs", io);
      list.push_back(SummaryJson(*summary));
    }
    io.out << "{\"jobs\":[" << absl::StrJoin(list, ",") << "]}" << std::endl;
    return kExitOk;
  }
  if (jobs->empty()) {
    io.out << "No jobs in " << DataDirOf(args) << "/jobs.db." << std::endl;
    return kExitOk;
  }
  Table table({"job", "state", "iterations", "of", "predicted", "elapsed", "profiling", "cost",
               "revocations", "started"});
  table.LeftAlign(1);
  for (const JobRecord& j : *jobs) {
    auto revocations = (*store)->Revocations(j.id);
    auto summary = job::SummarizeJob(**store, j.id, NowMs());
    const int64_t end = j.finished_ms > 0 ? j.finished_ms : NowMs();
    table.AddRow({j.id, StateText(**store, j), Fixed(j.iterations_done, 0),
                  Fixed(j.target_iterations, 0), HumanDuration(j.predicted_time_s),
                  j.started_ms > 0 ? HumanDuration((end - j.started_ms) / 1000.0) : "-",
                  summary.ok() && (summary->profiling_s > 0 || summary->profiling_cost_usd > 0)
                      ? absl::StrCat(HumanDuration(summary->profiling_s), ", ",
                                     Dollars(summary->profiling_cost_usd))
                      : "-",
                  summary.ok() ? Dollars(summary->actual_cost_usd) : "?",
                  revocations.ok() ? absl::StrCat(revocations->size()) : "?", Ms(j.started_ms)});
  }
  table.Print(io.out);
  return kExitOk;
}

int Status(const Args& args, const Io& io) {
  const std::string id = args.positional()[0];
  auto store = OpenJobStore(args);
  if (!store.ok()) return ReportError(store.status(), "status", io);
  auto job = (*store)->GetJob(id);
  if (!job.ok()) return ReportError(job.status(), "status", io);
  auto summary = job::SummarizeJob(**store, id, NowMs());
  if (!summary.ok()) return ReportError(summary.status(), "status", io);
  auto instances = (*store)->Instances(id);
  if (!instances.ok()) return ReportError(instances.status(), "status", io);
  auto events = (*store)->Events(id);
  if (!events.ok()) return ReportError(events.status(), "status", io);
  const Driver driver = DriverOf(**store, *job);
  // The live refit's first and latest forecasts, the deadline counted as they count it.
  const JobForecasts forecasts = ForecastsOf(*events);
  const double forecast_deadline_s =
      summary->deadline_s > 0 ? summary->deadline_s - summary->profiling_s : 0;
  // --plot draws what the job has, and the status is shown whatever the plot could draw.
  std::string plot_file, plot_missing, plot_error;
  if (auto file = args.Get("--plot")) {
    auto progress = (*store)->Progress(id);
    auto revocations = (*store)->Revocations(id);
    absl::StatusOr<LossPlot> plot =
        !progress.ok()      ? absl::StatusOr<LossPlot>(progress.status())
        : !revocations.ok() ? absl::StatusOr<LossPlot>(revocations.status())
                            : LossPlotOf(*job, *progress, *instances, *revocations, *events);
    if (!plot.ok()) {
      plot_error = std::string(plot.status().message());
    } else {
      std::ofstream out(*file);
      out << LossPlotSvg(*plot);
      if (!out.flush()) {
        return ReportError(
            absl::InvalidArgumentError(
                absl::StrCat("--plot = \"", *file, "\": cannot write it: ", std::strerror(errno))),
            "status", io);
      }
      plot_file = *file;
      plot_missing = plot->missing;
    }
  }
  if (io.json) {
    std::vector<std::string> list, log;
    for (const job::InstanceRecord& i : *instances) {
      // Times not known yet (not launched, not ended) are null.
      const double launched = i.launched_ms > 0 ? static_cast<double>(i.launched_ms) : NAN;
      const double ended = i.ended_ms > 0 ? static_cast<double>(i.ended_ms) : NAN;
      list.push_back(JsonObject()
                         .String("id", i.id)
                         .String("role", std::string(launcher::RoleName(i.role)))
                         .String("instance_type", i.instance_type)
                         .Integer("index", i.index)
                         .String("reason", std::string(job::Name(i.reason)))
                         .String("market", std::string(launcher::MarketName(i.market)))
                         .String("zone", i.zone)
                         .String("launch_token", i.launch_token)
                         .String("state", std::string(job::Name(i.state)))
                         .Number("price_per_hour", i.price_per_hour)
                         .Number("predicted_iteration_s", i.predicted_iteration_s)
                         .Number("launched_unix_ms", launched)
                         .Number("ended_unix_ms", ended)
                         .str());
    }
    for (const job::JobEventRecord& e : *events) {
      log.push_back(JsonObject()
                        .Integer("at_unix_ms", e.at_ms)
                        .String("kind", e.kind)
                        .String("detail", e.detail)
                        .str());
    }
    io.out << JsonObject()
                  .String("job_id", id)
                  .String("state", std::string(job::Name(job->state)))
                  .String("message", job->message)
                  .Raw("summary", SummaryJson(*summary))
                  .Raw("forecast",
                       ForecastsJson(forecasts, summary->iterations_done, forecast_deadline_s))
                  .Raw("instances", "[" + absl::StrJoin(list, ",") + "]")
                  .Raw("events", "[" + absl::StrJoin(log, ",") + "]")
                  .Raw("gateway", GatewayJson(driver, *job))
                  .String("plot", plot_file)
                  .String("plot_missing", plot_missing)
                  .String("plot_error", plot_error)
                  .str()
           << std::endl;
    return plot_error.empty() ? kExitOk : kExitFailure;
  }
  io.out << "Job " << id << ": " << job::Name(job->state)
         << (job->message.empty() ? "" : " (" + job->message + ")") << "\n";
  if (driver.known && !driver.alive) {
    io.out << "No gateway is driving it: the `spotdnn run` that ran it is gone (nothing holds the "
              "job's lock), so nothing watches its instances or takes over revocations. Resume it "
              "with `"
           << ResumeCommand(*job) << "`.\n";
  } else if (driver.known) {
    io.out << "Driven by gateway " << (driver.holder.empty() ? "(unnamed)" : driver.holder)
           << ".\n";
  }
  PrintSummary(*summary, io.out);
  io.out << "\n";
  if (forecasts.first.has_value()) {
    PrintForecasts(forecasts, summary->iterations_done, forecast_deadline_s, io.out);
    io.out << "\n";
  }
  // The zone column where the provider said where instances run.
  const bool zones = std::any_of(instances->begin(), instances->end(),
                                 [](const job::InstanceRecord& i) { return !i.zone.empty(); });
  std::vector<std::string> header = {"instance", "role",     "type",  "market", "why",
                                     "state",    "launched", "ended", "$/h"};
  if (zones) header.insert(header.begin() + 3, "zone");
  Table table(header);
  for (size_t c = 1; c <= (zones ? 6u : 5u); ++c) table.LeftAlign(c);
  for (const job::InstanceRecord& i : *instances) {
    std::vector<std::string> row = {i.id,
                                    std::string(launcher::RoleName(i.role)),
                                    i.instance_type,
                                    std::string(launcher::MarketName(i.market)),
                                    std::string(job::Name(i.reason)),
                                    std::string(job::Name(i.state)),
                                    Ms(i.launched_ms),
                                    Ms(i.ended_ms),
                                    Fixed(i.price_per_hour, 4)};
    if (zones) row.insert(row.begin() + 3, i.zone.empty() ? "-" : i.zone);
    table.AddRow(row);
  }
  table.Print(io.out);
  io.out << "\n";
  Table log({"time", "event", "detail"});
  log.LeftAlign(1);
  log.LeftAlign(2);
  for (const job::JobEventRecord& e : *events) {
    log.AddRow({Ms(e.at_ms), e.kind, EventDetailText(e)});
  }
  log.Print(io.out);
  if (!plot_file.empty()) {
    io.out << "\nChart written to " << plot_file
           << (plot_missing.empty() ? "" : " (" + plot_missing + ")") << "\n";
  }
  if (!plot_error.empty()) {
    io.err << "spotdnn status: --plot: " << plot_error << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> JobCommands() {
  return {
      {.name = "run",
       .summary = "run a job end to end: plan, launch, watch, take over revoked instances, summary",
       .synopsis =
           "JOB.json [--json] [--data-dir D] [--store SPEC] [--provisioner H:P]\n"
           "[--profiler H:P] [--detector H:P] [--metadata-emulator URL] [--stall-timeout T]\n"
           "[--spot-probe-every T]\n"
           "--resume JOB [--json] [--data-dir D] ...",
       .description =
           "Runs a job end to end: profiles it if its spec says so, plans the cheapest cluster "
           "that meets its\nSLO, launches it, registers every instance with the detector and "
           "follows its events and the\nworkers' progress; on a revocation notice it re-plans "
           "with the survivors and the progress so far\nand launches the takeover instances "
           "while the revoked one still runs. When spot capacity runs out\n(a takeover the cloud "
           "has no spot capacity for), the deadline policy decides what runs on\non-demand "
           "until spot returns (spec \"fallback\"; each decision a \"deadline\" event in the "
           "job's log).\nWith a loss target it refits the job's convergence from its own loss as "
           "it comes in (the\nprofile as the prior), logs the predicted finish (forecast events) "
           "and re-plans a larger\ncluster when that passes the deadline. "
           "It ends with a summary: predicted vs actual time and\ncost, spot and "
           "on-demand hours, revocations handled, SLO met. The job's state is kept "
           "in\nDATA_DIR/jobs.db "
           "(or --store): after the gateway dies, `spotdnn run --resume JOB` reattaches to the\n"
           "running instances and launches nothing twice; one gateway runs a job at a time (a "
           "lock in the\nstore: with a PostgreSQL store, across hosts). "
           "See deploy/examples/job.json for the spec.\n\n"
           "The services come from `spotdnn up` (DATA_DIR/stack.json) unless named with "
           "--provisioner,\n--profiler and --detector; the local provider's instances read "
           "their metadata (revocation\nnotices) from the stack's emulator or "
           "--metadata-emulator.",
       .flags = {DataDirFlag(),
                 StoreFlag(),
                 {"--resume", "JOB", "take a stored job up again where it is"},
                 {"--provisioner", "H:P", "the spotdnn-provisioner (default: the stack's)"},
                 {"--profiler", "H:P", "the spotdnn-profiler (default: the stack's)"},
                 {"--detector", "H:P", "the spotdnn-detector (default: the stack's)"},
                 {"--metadata-emulator", "URL",
                  "the emulator giving local instances their metadata endpoints"},
                 {"--stall-timeout", "T",
                  "fail the job when no worker reports a new iteration for T (default 10m;\n"
                  "0: never)"},
                 {"--spot-probe-every", "T",
                  "while spot is short, try it again at most once per T per type, doubling\n"
                  "after each refusal up to 16m (default 1m)"},
                 {"--json", "",
                  "one JSON object per event, one per line (the last one has the "
                  "summary)"}},
       .max_positional = 1,
       .footer = "Exit status: 0 the job met its SLO, 3 it finished without meeting it or "
                 "failed, 2 bad input,\n1 a service could not be reached.",
       .run = Run},
      {.name = "jobs",
       .summary = "the jobs run so far; status JOB shows one",
       .synopsis = "[--json] [--data-dir D] [--store SPEC]",
       .description = "Lists the jobs in DATA_DIR/jobs.db (or the --store).",
       .flags = {DataDirFlag(), StoreFlag()},
       .run = Jobs},
      {.name = "status",
       .summary = "one job's summary, instances, revocations and event log",
       .synopsis = "JOB [--json] [--data-dir D] [--store SPEC] [--plot FILE.svg]",
       .description =
           "Shows one job of DATA_DIR/jobs.db: its summary (with its profiling phase's time and "
           "cost),\nthe live refit's first and current forecast of the steps and the finish (p10, "
           "p50, p90),\ninstances, revocations (with notice-to-takeover times), event log, and "
           "whether a gateway\ndrives it. A job not ended says whether it is on track, not what "
           "it has not yet met.\n--plot also writes an SVG chart of what the job has, and still "
           "prints the status: the\npredicted loss curve (the first plan's cluster, from the "
           "workload's loss model), the\nlive refit's latest curve with its finish interval, and "
           "the workers' smoothed loss with the\ntarget and the "
           "ends, or, without a reported loss, the\niterations done against the plan's line; "
           "the revocation notices as marks and the cost. What\nit cannot draw (no loss "
           "reported, not started) is said on the chart and after \"Chart\nwritten to\".",
       .flags = {DataDirFlag(),
                 StoreFlag(),
                 {"--plot", "FILE.svg",
                  "also write a chart of the job's loss (or progress), revocations and cost"}},
       .min_positional = 1,
       .max_positional = 1,
       .run = Status},
  };
}

}  // namespace spotdnn::gateway
