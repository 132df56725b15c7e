// `spotdnn run`, `spotdnn jobs`, `spotdnn status`, `spotdnn up` and `spotdnn down`.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "provisioner/aws_provider.h"
#include "provisioner/local_provider.h"
#include "services/common/server.h"
#include "services/gateway/cli.h"
#include "services/gateway/job_runner.h"
#include "services/gateway/output.h"
#include "services/gateway/stack.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;

constexpr char kRunUsage[] =
    R"(Usage: spotdnn run JOB.json [--json] [--data-dir D] [--provisioner H:P] [--profiler H:P]
                   [--detector H:P] [--metadata-emulator URL] [--stall-timeout T]
       spotdnn run --resume JOB [--json] [--data-dir D] ...

Runs a job end to end: profiles it if its spec says so, plans the cheapest cluster that meets its
SLO, launches it, registers every instance with the detector and follows its events and the
workers' progress; on a revocation notice it re-plans with the survivors and the progress so far
and launches the takeover instances while the revoked one still runs. It ends with a summary:
predicted vs actual time and cost, revocations handled, SLO met. The job's state is kept in
DATA_DIR/jobs.db: after the gateway dies, `spotdnn run --resume JOB` reattaches to the running
instances and launches nothing twice. See deploy/examples/job.json for the spec.

The services come from `spotdnn up` (DATA_DIR/stack.json) unless named with --provisioner,
--profiler and --detector; the local provider's instances read their metadata (revocation
notices) from the stack's emulator or --metadata-emulator.

  --data-dir D   state folder (default $SPOTDNN_HOME, else ~/.spotdnn)
  --json         one JSON object per event, one per line (the last one has the summary)
  --stall-timeout T  fail the job when no worker reports a new iteration for T (default 10m;
                 0: never)
Exit status: 0 the job met its SLO, 3 it finished without meeting it or failed, 2 bad input,
1 a service could not be reached.
)";

constexpr char kJobsUsage[] = R"(Usage: spotdnn jobs [--json] [--data-dir D]
       spotdnn status JOB [--json] [--data-dir D]

jobs lists the jobs in DATA_DIR/jobs.db; status shows one: its summary, instances, revocations
(with notice-to-takeover times) and event log.
)";

constexpr char kUpUsage[] = R"(Usage: spotdnn up [--data-dir D] [--bin-dir B] [--json]
       spotdnn down [--data-dir D] [--json]

up starts spotdnn-predictor, spotdnn-provisioner, spotdnn-profiler, spotdnn-detector and the
metadata emulator the local provider's instances use, on free 127.0.0.1 ports, in the
background, with their databases and logs under DATA_DIR (default $SPOTDNN_HOME, else
~/.spotdnn); it writes DATA_DIR/stack.json and does nothing when the stack is already up.
--bin-dir: where the binaries are (default: beside this spotdnn). down stops them.
)";

std::string DataDir(const Args& args) { return args.Get("--data-dir").value_or(DefaultDataDir()); }

std::string Ms(int64_t unix_ms) {
  return unix_ms > 0
             ? absl::FormatTime("%H:%M:%E3S", absl::FromUnixMillis(unix_ms), absl::LocalTimeZone())
             : "-";
}

// Prints the summary JSON of a job as a table.
void PrintSummary(const std::string& summary_json, std::ostream& out) {
  nlohmann::json s = nlohmann::json::parse(summary_json, nullptr, false);
  if (!s.is_object()) return;
  auto num = [&](const char* key) { return s.value(key, 0.0); };
  auto yes = [&](const char* key) { return s.value(key, false) ? "yes" : "NO"; };
  Table table({"", "predicted", "actual"});
  table.AddRow(
      {"time", HumanDuration(num("predicted_time_s")), HumanDuration(num("actual_time_s"))});
  table.AddRow({"cost", Dollars(num("predicted_cost_usd")), Dollars(num("actual_cost_usd"))});
  table.AddRow({"normalized iterations", Fixed(num("target_iterations"), 0),
                Fixed(num("iterations_done"), 0)});
  table.Print(out);
  out << "Instances launched: " << s.value("instances_launched", 0) << " ("
      << s.value("takeover_instances", 0)
      << " takeover); revocations handled: " << s.value("revocations_handled", 0) << " of "
      << s.value("revocations", 0) << "\n";
  if (s["revocation_list"].is_array() && !s["revocation_list"].empty()) {
    Table revocations({"revoked", "takeover", "notice -> takeover running", "-> training",
                       "takeover before it ended"});
    revocations.LeftAlign(1);
    for (const auto& r : s["revocation_list"]) {
      revocations.AddRow(
          {r.value("instance", ""), r.value("takeover", ""),
           r.contains("notice_to_takeover_running_s")
               ? absl::StrFormat("%.2f s", r.value("notice_to_takeover_running_s", 0.0))
               : "-",
           r.contains("notice_to_takeover_training_s")
               ? absl::StrFormat("%.2f s", r.value("notice_to_takeover_training_s", 0.0))
               : "-",
           r.contains("takeover_before_revoked_ended")
               ? (r.value("takeover_before_revoked_ended", false) ? "yes" : "NO")
               : "-"});
    }
    revocations.Print(out);
  }
  if (s["predicted_p_meet_deadline"].is_number()) {
    out << absl::StrFormat(
        "Predicted P(meet deadline): %.4f [%.4f, %.4f] (slo.confidence %g); deadline met: %s\n",
        num("predicted_p_meet_deadline"), num("predicted_p_meet_deadline_low"),
        num("predicted_p_meet_deadline_high"), num("confidence"), yes("deadline_met"));
  }
  out << "Loss reached: " << yes("loss_reached") << "; deadline met: " << yes("deadline_met")
      << "; budget met: " << yes("budget_met") << "; SLO met: " << yes("slo_met") << std::endl;
}

absl::StatusOr<std::unique_ptr<launcher::CloudProvider>> ProviderFor(const JobSpec& spec,
                                                                     const std::string& data_dir,
                                                                     const std::string& emulator) {
  if (spec.provider == "local") {
    launcher::LocalProvider::Options options{
        .state_dir = (fs::path(data_dir) / "local").string(), .owner = true, .detached = true};
    options.capacity = spec.local_capacity;
    if (!emulator.empty()) {
      options.metadata = std::make_shared<launcher::EmulatorMetadataClient>(emulator);
    }
    auto local = launcher::LocalProvider::Create(options);
    if (!local.ok()) return local.status();
    return std::unique_ptr<launcher::CloudProvider>(std::move(*local));
  }
  auto credentials = launcher::ResolveAwsCredentials({});
  if (!credentials.ok()) return credentials.status();
  launcher::AwsProvider::Options options;
  options.region = spec.region.empty() ? "us-east-1" : spec.region;
  options.credentials = *credentials;
  auto get = [&](const char* key) {
    auto it = spec.provider_options.find(key);
    return it == spec.provider_options.end() ? std::string() : it->second;
  };
  options.endpoint_url = get("endpoint_url");
  options.image_id = get("image_id");
  options.subnet_id = get("subnet_id");
  options.key_name = get("key_name");
  options.iam_instance_profile = get("iam_instance_profile");
  options.max_spot_price = get("max_spot_price");
  for (absl::string_view g : absl::StrSplit(get("security_group_ids"), ',', absl::SkipEmpty())) {
    options.security_group_ids.emplace_back(g);
  }
  auto aws = launcher::AwsProvider::Create(options);
  if (!aws.ok()) return aws.status();
  return std::unique_ptr<launcher::CloudProvider>(std::move(*aws));
}

// Holds DATA_DIR/locks/JOB.lock (flock) for as long as this gateway runs the job: a second
// gateway on the same job (a --resume while the first still runs) would re-plan and launch
// takeovers of its own. The kernel drops the lock when the process dies, even by kill -9.
class JobLock {
 public:
  static absl::StatusOr<std::unique_ptr<JobLock>> Acquire(const std::string& data_dir,
                                                          const std::string& job_id) {
    const fs::path dir = fs::path(data_dir) / "locks";
    std::error_code ec;
    fs::create_directories(dir, ec);
    const fs::path path = dir / (job_id + ".lock");
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::UnavailableError(
          absl::StrCat(path.string(), ": cannot be opened: ", std::strerror(errno)));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      char buffer[32] = {0};
      const ssize_t n = pread(fd, buffer, sizeof buffer - 1, 0);
      close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat("job \"", job_id, "\" is being run by another gateway",
                       n > 0 ? absl::StrCat(" (pid ", absl::StripAsciiWhitespace(buffer), ")") : "",
                       ": wait for it, or stop it before `spotdnn run --resume ", job_id, "`"));
    }
    const std::string pid = absl::StrCat(getpid(), "\n");
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      // The lock holds without the pid; the pid only makes the message friendlier.
    }
    return std::unique_ptr<JobLock>(new JobLock(fd));
  }
  ~JobLock() { close(fd_); }
  JobLock(const JobLock&) = delete;
  JobLock& operator=(const JobLock&) = delete;

 private:
  explicit JobLock(int fd) : fd_(fd) {}
  int fd_;
};

int Run(const Args& args, const Io& io) {
  const std::string data_dir = DataDir(args);
  const auto resume = args.Get("--resume");
  if (resume.has_value() == (args.positional().size() == 1)) {
    return ReportError(absl::InvalidArgumentError("give a job spec file, or --resume JOB"), "run",
                       io);
  }
  auto store = JobStore::Open((fs::path(data_dir) / "jobs.db").string());
  if (!store.ok()) return ReportError(store.status(), "run", io);
  std::string spec_json;
  if (resume) {
    auto job = (*store)->GetJob(*resume);
    if (!job.ok()) return ReportError(job.status(), "run", io);
    spec_json = job->spec_json;
  } else {
    std::ifstream in(args.positional()[0]);
    if (!in) {
      return ReportError(absl::NotFoundError(absl::StrCat("job spec \"", args.positional()[0],
                                                          "\" cannot be read")),
                         "run", io);
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    spec_json = buffer.str();
  }
  auto spec = ParseJobSpec(spec_json);
  if (!spec.ok()) return ReportError(spec.status(), "run", io);
  auto lock = JobLock::Acquire(data_dir, spec->name);
  if (!lock.ok()) return ReportError(lock.status(), "run", io);
  absl::Duration stall_timeout = absl::Minutes(10);
  if (auto v = args.Get("--stall-timeout")) {
    auto d = *v == "0" ? absl::StatusOr<double>(0) : ParseDuration("--stall-timeout", *v);
    if (!d.ok()) return ReportError(d.status(), "run", io);
    stall_timeout = absl::Seconds(*d);
  }

  // The services: named, or the stack's.
  std::string provisioner = args.Get("--provisioner").value_or("");
  std::string profiler = args.Get("--profiler").value_or("");
  std::string detector = args.Get("--detector").value_or("");
  std::string emulator = args.Get("--metadata-emulator").value_or("");
  if (provisioner.empty() || profiler.empty() || detector.empty()) {
    auto stack = ReadStack(data_dir);
    if (!stack.ok()) return ReportError(stack.status(), "run", io);
    if (provisioner.empty()) provisioner = stack->provisioner;
    if (profiler.empty()) profiler = stack->profiler;
    if (detector.empty()) detector = stack->detector;
    if (emulator.empty()) emulator = stack->emulator;
  }
  for (const auto& [flag, target] :
       {std::pair<const char*, std::string>{"--provisioner", provisioner},
        {"--profiler", profiler},
        {"--detector", detector}}) {
    if (target.find(':') == std::string::npos) {
      return ReportError(
          absl::InvalidArgumentError(absl::StrCat(flag, " = \"", target, "\": expected HOST:PORT")),
          "run", io);
    }
  }
  auto provisioner_stub = pb::Provisioner::NewStub(services::MakeChannel(provisioner));
  auto profiler_stub = pb::Profiler::NewStub(services::MakeChannel(profiler));
  auto detector_stub = pb::Detector::NewStub(services::MakeChannel(detector));
  if (spec->provider == "local") {
    // Local instances find the spotdnn binaries (spotdnn-sim-worker, spotdnn-agent) beside this
    // one.
    const char* path = std::getenv("PATH");
    setenv("PATH", absl::StrCat(SelfDir(), ":", path != nullptr ? path : "/usr/bin:/bin").c_str(),
           1);
  }
  auto provider = ProviderFor(*spec, data_dir, emulator);
  if (!provider.ok()) return ReportError(provider.status(), "run", io);

  RunnerEnv env{.provisioner = provisioner_stub.get(),
                .profiler = profiler_stub.get(),
                .detector = detector_stub.get(),
                .provider = provider->get(),
                .store = store->get(),
                .profiler_address = profiler,
                .detector_address = detector,
                .stall_timeout = stall_timeout};
  if (auto* local = dynamic_cast<launcher::LocalProvider*>(provider->get()); local != nullptr) {
    env.instance_logs = (fs::path(local->state_dir()) / "logs").string();
  }
  env.on_update = [&io](const JobUpdate& u) {
    if (io.json) {
      io.out << u.json << std::endl;
    } else if (u.kind != "finished" && u.kind != "failed") {
      io.out << u.line << std::endl;
    }
  };
  std::string job_id = spec->name;
  if (!resume) {
    const services::DataRegistry local = services::DataRegistry::WithBuiltins();
    auto planned = PlanJob(spec_json, env, local);
    if (!planned.ok()) {
      const absl::Status& s = planned.status();
      ReportError(s, "run", io);
      return absl::IsFailedPrecondition(s)                           ? kExitInfeasible
             : absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ? kExitFailure
                                                                     : kExitBadInput;
    }
  }
  auto done = RunJob(job_id, env);
  if (!done.ok()) {
    ReportError(done.status(), "run", io);
    if (!io.json) {
      io.err << "The job's instances keep running; resume with `spotdnn run --resume " << job_id
             << "`." << std::endl;
    }
    return kExitFailure;
  }
  nlohmann::json summary = nlohmann::json::parse(done->summary_json, nullptr, false);
  if (!io.json) {
    io.out << "\nJob " << job_id << " " << done->state
           << (done->message.empty() ? "" : ": " + done->message) << "\n";
    PrintSummary(done->summary_json, io.out);
  }
  const bool met = summary.is_object() && summary.value("slo_met", false);
  return done->state == "finished" && met ? kExitOk : kExitInfeasible;
}

int Jobs(const Args& args, const Io& io) {
  auto store = JobStore::Open((fs::path(DataDir(args)) / "jobs.db").string());
  if (!store.ok()) return ReportError(store.status(), "jobs", io);
  auto jobs = (*store)->ListJobs();
  if (!jobs.ok()) return ReportError(jobs.status(), "jobs", io);
  if (io.json) {
    std::string list;
    for (const JobRecord& j : *jobs) {
      auto summary = JobSummaryJson(**store, j.id);
      absl::StrAppend(&list, list.empty() ? "" : ",", summary.ok() ? *summary : "{}");
    }
    io.out << "{\"jobs\":[" << list << "]}" << std::endl;
    return kExitOk;
  }
  if (jobs->empty()) {
    io.out << "No jobs in " << DataDir(args) << "/jobs.db." << std::endl;
    return kExitOk;
  }
  Table table(
      {"job", "state", "iterations", "of", "predicted", "elapsed", "revocations", "started"});
  table.LeftAlign(1);
  for (const JobRecord& j : *jobs) {
    auto revocations = (*store)->Revocations(j.id);
    const int64_t end = j.finished_ms > 0 ? j.finished_ms : absl::ToUnixMillis(absl::Now());
    table.AddRow({j.id, j.state, Fixed(j.iterations_done, 0), Fixed(j.target_iterations, 0),
                  HumanDuration(j.predicted_time_s),
                  j.started_ms > 0 ? HumanDuration((end - j.started_ms) / 1000.0) : "-",
                  revocations.ok() ? absl::StrCat(revocations->size()) : "?", Ms(j.started_ms)});
  }
  table.Print(io.out);
  return kExitOk;
}

int Status(const Args& args, const Io& io) {
  if (args.positional().size() != 1) {
    return ReportError(absl::InvalidArgumentError("give exactly one JOB"), "status", io);
  }
  const std::string id = args.positional()[0];
  auto store = JobStore::Open((fs::path(DataDir(args)) / "jobs.db").string());
  if (!store.ok()) return ReportError(store.status(), "status", io);
  auto job = (*store)->GetJob(id);
  if (!job.ok()) return ReportError(job.status(), "status", io);
  auto summary = JobSummaryJson(**store, id);
  auto instances = (*store)->Instances(id);
  auto events = (*store)->Events(id);
  if (!summary.ok()) return ReportError(summary.status(), "status", io);
  if (!instances.ok()) return ReportError(instances.status(), "status", io);
  if (!events.ok()) return ReportError(events.status(), "status", io);
  if (io.json) {
    std::string list, log;
    for (const InstanceRecord& i : *instances) {
      absl::StrAppend(&list, list.empty() ? "" : ",",
                      JsonObject()
                          .String("id", i.id)
                          .String("role", i.role)
                          .String("instance_type", i.instance_type)
                          .Integer("index", i.index)
                          .String("reason", i.reason)
                          .String("launch_token", i.launch_token)
                          .String("state", i.state)
                          .Number("price_per_hour", i.price_per_hour)
                          .Number("predicted_iteration_s", i.predicted_iteration_s)
                          .Integer("launched_unix_ms", i.launched_ms)
                          .Integer("ended_unix_ms", i.ended_ms)
                          .str());
    }
    for (const JobEventRecord& e : *events) {
      absl::StrAppend(&log, log.empty() ? "" : ",",
                      JsonObject()
                          .Integer("at_unix_ms", e.at_ms)
                          .String("kind", e.kind)
                          .String("detail", e.detail)
                          .str());
    }
    io.out << JsonObject()
                  .String("job_id", id)
                  .String("state", job->state)
                  .String("message", job->message)
                  .Raw("summary", *summary)
                  .Raw("instances", "[" + list + "]")
                  .Raw("events", "[" + log + "]")
                  .str()
           << std::endl;
    return kExitOk;
  }
  io.out << "Job " << id << ": " << job->state
         << (job->message.empty() ? "" : " (" + job->message + ")") << "\n";
  PrintSummary(*summary, io.out);
  io.out << "\n";
  Table table({"instance", "role", "type", "why", "state", "launched", "ended", "$/h"});
  table.LeftAlign(1);
  table.LeftAlign(2);
  table.LeftAlign(3);
  table.LeftAlign(4);
  for (const InstanceRecord& i : *instances) {
    table.AddRow({i.id, i.role, i.instance_type, i.reason, i.state, Ms(i.launched_ms),
                  Ms(i.ended_ms), Fixed(i.price_per_hour, 4)});
  }
  table.Print(io.out);
  io.out << "\n";
  Table log({"time", "event", "detail"});
  log.LeftAlign(1);
  log.LeftAlign(2);
  for (const JobEventRecord& e : *events) log.AddRow({Ms(e.at_ms), e.kind, e.detail});
  log.Print(io.out);
  return kExitOk;
}

int Up(const Args& args, const Io& io) {
  const std::string data_dir = DataDir(args);
  const std::string bin_dir = args.Get("--bin-dir").value_or(SelfDir());
  if (!io.json) io.out << "Starting the spotdnn stack in " << data_dir << ":" << std::endl;
  auto stack = StartStack(data_dir, bin_dir, io.json ? nullptr : &io.out);
  if (!stack.ok()) return ReportError(stack.status(), "up", io);
  if (io.json) {
    io.out << JsonObject()
                  .String("data_dir", stack->data_dir)
                  .String("predictor", stack->predictor)
                  .String("provisioner", stack->provisioner)
                  .String("profiler", stack->profiler)
                  .String("detector", stack->detector)
                  .String("metadata_emulator", stack->emulator)
                  .str()
           << std::endl;
  } else {
    io.out << "Up: predictor " << stack->predictor << ", provisioner " << stack->provisioner
           << ", profiler " << stack->profiler << ", detector " << stack->detector
           << ", metadata emulator " << stack->emulator << "\n(logs in " << data_dir
           << "/logs; stop with `spotdnn down`)" << std::endl;
  }
  return kExitOk;
}

int Down(const Args& args, const Io& io) {
  absl::Status s = StopStack(DataDir(args));
  if (!s.ok()) return ReportError(s, "down", io);
  if (io.json) {
    io.out << JsonObject().Bool("stopped", true).str() << std::endl;
  } else {
    io.out << "Stopped the spotdnn stack in " << DataDir(args) << "." << std::endl;
  }
  return kExitOk;
}

}  // namespace

absl::string_view RunUsage() { return kRunUsage; }
absl::string_view JobsUsage() { return kJobsUsage; }
absl::string_view UpUsage() { return kUpUsage; }

int JobCommand(const std::string& command, const std::vector<std::string>& argv, std::ostream& out,
               std::ostream& err) {
  const char* usage = command == "run"                           ? kRunUsage
                      : command == "jobs" || command == "status" ? kJobsUsage
                                                                 : kUpUsage;
  if (!argv.empty() && (argv[0] == "--help" || argv[0] == "-h")) {
    out << usage;
    return kExitOk;
  }
  Io io{out, err, std::find(argv.begin(), argv.end(), "--json") != argv.end()};
  auto args = Args::Parse(
      argv, {.values = {"--data-dir", "--bin-dir", "--resume", "--provisioner", "--profiler",
                        "--detector", "--metadata-emulator", "--stall-timeout"},
             .switches = {"--json"}});
  if (!args.ok()) {
    ReportError(args.status(), command, io);
    err << usage;
    return kExitBadInput;
  }
  if (command == "run") return Run(*args, io);
  if (command == "jobs") return Jobs(*args, io);
  if (command == "status") return Status(*args, io);
  if (command == "up") return Up(*args, io);
  return Down(*args, io);
}

}  // namespace spotdnn::gateway
