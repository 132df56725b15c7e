// spotdnn profile: import logs, fit, store, show and export workload profiles, and validate the
// cluster-speed model on held-out cluster sizes.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "profiler/fitting.h"
#include "profiler/importers.h"
#include "profiler/profile_store.h"
#include "services/common/convert.h"
#include "services/common/server.h"
#include "services/gateway/cli.h"
#include "services/gateway/output.h"
#include "services/profiler/profiler_service.h"

namespace spotdnn::gateway {
namespace {

constexpr char kProfileUsage[] =
    R"(Usage: spotdnn profile SUBCOMMAND [FLAGS]

Subcommands:
  import PATH              import training logs (a file or a folder) as samples; a .json file is
                           a workload profile and is stored as the next version of its name
      --job ID             job the samples belong to (a folder: prefix of its run folders' jobs)
      --format F           auto (default), tensorboard, spotdnn-worker, csv, samples
      --stop-on-error      stop at the first malformed line and import nothing
      --instance-type T --gpu-type G --gpus N --batch B --workers N
                           context the log lacks (a <series>worker<N> folder gives --workers)
  fit --name NAME          fit a profile from the stored samples and store it as a new version
      --jobs ID[,ID...]    samples of these jobs only (default: all)
      --base W             built-in workload or JSON file whose values the fit keeps and fills
      --ps-bandwidth MB/S  the parameter server's bandwidth B_ps (needed for contention a1, b1)
      --pcie-bandwidth MB/S  B_pcie (default 10000)
      --require P[,P...]   fail unless these are identified: S_parm, B_req, T_comp, contention,
                           memory, loss
  show NAME [--version V]  a stored profile's parameters
  list                     the latest version of every stored profile
  export NAME [--version V] [--out FILE]
                           the profile as JSON, the shape `spotdnn predict --workload FILE` reads
  delete NAME [--version V]  delete one version (default: every version)
  validate-speed --runs DIR[,DIR...] --fit-workers N,N,N[,...]
                           for every <series>worker<N> series in DIR: fit the cluster-speed model
                           on the listed worker counts only, predict the others, print observed,
                           predicted and error per point, per-series MAPE and the overall MAPE

Common flags:
  --json                   print one JSON object
  --db FILE                the profile database of the in-process profiler (default:
                           $SPOTDNN_PROFILE_DB, else ~/.spotdnn/profiles.db, else
                           ./spotdnn-profiles.db)
  --server HOST:PORT       use a running spotdnn-profiler instead (validate-speed always runs here);
                           import sends a file's content, and a folder's path, which the server
                           reads only under its --import_root
)";

// The profiler behind a command: a remote stub, or the service run in-process over --db.
struct ProfilerConnection {
  std::unique_ptr<services::ProfilerServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<pb::Profiler::StubInterface> stub;
};

absl::StatusOr<ProfilerConnection> ConnectProfiler(const Args& args) {
  ProfilerConnection c;
  if (auto target = args.Get("--server")) {
    if (target->find(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--server = \"", *target, "\": expected HOST:PORT"));
    }
    c.stub = pb::Profiler::NewStub(services::MakeChannel(*target));
    return c;
  }
  const std::string db = args.Get("--db").value_or(DefaultProfileDb());
  auto store = profiler::ProfileStore::Open(db);
  if (!store.ok()) return store.status();
  // In-process, the caller is this process: it imports whatever its user can read.
  services::ProfilerOptions options;
  options.import_any_path = true;
  options.max_import_bytes = std::numeric_limits<std::uint64_t>::max();
  options.max_call_time = absl::InfiniteDuration();
  options.max_fit_time = absl::InfiniteDuration();
  c.service = std::make_unique<services::ProfilerServiceImpl>(
      std::shared_ptr<profiler::ProfileStore>(*std::move(store)), std::move(options));
  auto started = services::StartServer("", {c.service.get()});
  if (!started.ok()) return started.status();
  c.server = std::move(started->server);
  c.stub = pb::Profiler::NewStub(c.server->InProcessChannel(services::DefaultChannelArguments()));
  return c;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  return context;
}

absl::StatusOr<std::string> OnePositional(const Args& args, absl::string_view what) {
  if (args.positional().size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected one ", what, ", got ", args.positional().size()));
  }
  return args.positional()[0];
}

absl::StatusOr<int> VersionFlag(const Args& args) {
  if (auto v = args.Get("--version")) return ParseInt("--version", *v, 1, 1'000'000'000);
  return 0;
}

void PrintProfile(const pb::WorkloadProfile& p, std::ostream& out) {
  Table summary({"quantity", "value"});
  summary.AddRow({"profile", absl::StrCat(p.name(), " (version ", p.version(), ")")});
  if (!p.source().empty()) summary.AddRow({"source", p.source()});
  summary.AddRow({"model variant", services::EnumLabel(p.model_variant())});
  summary.AddRow(
      {"S_parm (MB)", p.parameter_size_mb() > 0 ? Fixed(p.parameter_size_mb(), 3) : "-"});
  summary.AddRow({"B_req (MB/s)", p.required_bandwidth_mb_per_s() > 0
                                      ? Fixed(p.required_bandwidth_mb_per_s(), 2)
                                      : "-"});
  summary.AddRow({"contention a1, b1",
                  p.has_contention()
                      ? absl::StrFormat("%.4f, %.4f", p.contention().a1(), p.contention().b1())
                      : "-"});
  summary.AddRow(
      {"memory a2, b2",
       p.has_memory() ? absl::StrFormat("%.4f, %.4f", p.memory().a2(), p.memory().b2()) : "-"});
  summary.AddRow({"loss g1..g5",
                  p.has_loss()
                      ? absl::StrFormat("%.6g, %.6g, %.6g, %.6g, %.6g", p.loss().g1(),
                                        p.loss().g2(), p.loss().g3(), p.loss().g4(), p.loss().g5())
                      : "-"});
  summary.Print(out);
  if (p.compute_size() > 0) {
    out << "\n";
    Table compute({"instance type", "GPU type", "batch/GPU", "T_comp (s)", "samples/s"});
    compute.LeftAlign(1);
    for (const pb::ComputeProfile& c : p.compute()) {
      compute.AddRow({c.instance_type().empty() ? "-" : c.instance_type(),
                      c.gpu_type().empty() ? "-" : c.gpu_type(),
                      c.batch_per_gpu() > 0 ? absl::StrCat(c.batch_per_gpu()) : "eq. 10",
                      c.has_compute_time_s() ? Fixed(c.compute_time_s(), 5) : "-",
                      c.has_measured_samples_per_s() ? Fixed(c.measured_samples_per_s(), 1) : "-"});
    }
    compute.Print(out);
  }
}

int ImportCommand(const Args& args, pb::Profiler::StubInterface& stub, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "profile import", io); };
  auto path = OnePositional(args, "PATH to import");
  if (!path.ok()) return fail(path.status());
  if (std::filesystem::path(*path).extension() == ".json") {
    const services::DataRegistry local = services::DataRegistry::WithBuiltins();
    auto profile = local.ResolveWorkload(*path);
    if (!profile.ok()) return fail(profile.status());
    pb::WorkloadProfile stored;
    auto context = Context();
    if (auto s = services::FromGrpc(stub.PutProfile(context.get(), *profile, &stored)); !s.ok()) {
      return fail(s);
    }
    if (io.json) {
      io.out << services::ToJson(stored) << "\n";
    } else {
      io.out << "Stored profile " << stored.name() << " version " << stored.version() << "\n";
    }
    return kExitOk;
  }
  pb::ImportLogRequest request;
  if (auto format = args.Get("--format")) {
    auto parsed = profiler::ParseLogFormat(*format);
    if (!parsed.ok()) {
      return fail(absl::InvalidArgumentError(absl::StrCat("--", parsed.status().message())));
    }
    switch (*parsed) {
      case profiler::LogFormat::kTensorBoardCsv:
        request.set_format(pb::LOG_FORMAT_TENSORBOARD_CSV);
        break;
      case profiler::LogFormat::kSpotdnnWorker:
        request.set_format(pb::LOG_FORMAT_SPOTDNN_WORKER);
        break;
      case profiler::LogFormat::kCsv:
        request.set_format(pb::LOG_FORMAT_CSV);
        break;
      case profiler::LogFormat::kSampleLines:
        request.set_format(pb::LOG_FORMAT_SAMPLE_LINES);
        break;
      case profiler::LogFormat::kAuto:
        break;
    }
  }
  request.set_job_id(args.Get("--job").value_or(""));
  request.set_stop_on_error(args.Switch("--stop-on-error"));
  request.set_instance_type(args.Get("--instance-type").value_or(""));
  request.set_gpu_type(args.Get("--gpu-type").value_or(""));
  for (const auto& [flag, setter] :
       std::vector<std::pair<const char*, void (pb::ImportLogRequest::*)(int32_t)>>{
           {"--gpus", &pb::ImportLogRequest::set_gpus},
           {"--batch", &pb::ImportLogRequest::set_batch_size},
           {"--workers", &pb::ImportLogRequest::set_cluster_workers}}) {
    if (auto v = args.Get(flag)) {
      auto parsed = ParseInt(flag, *v, 1, 1'000'000);
      if (!parsed.ok()) return fail(parsed.status());
      (request.*setter)(*parsed);
    }
  }
  std::error_code ec;
  if (args.Has("--server") && std::filesystem::is_regular_file(*path, ec)) {
    // A remote server cannot read this machine's files: send the content.
    auto content = services::ReadFile(*path);
    if (!content.ok()) return fail(content.status());
    request.set_content(*content);
    if (request.job_id().empty()) request.set_job_id(std::filesystem::path(*path).stem().string());
  } else {
    request.set_path(std::filesystem::absolute(*path, ec).string());
  }
  request.set_path(request.content().empty() ? request.path() : *path);
  pb::ImportLogResponse response;
  auto context = Context();
  if (auto s = services::FromGrpc(stub.ImportLog(context.get(), request, &response)); !s.ok()) {
    return fail(s);
  }
  if (io.json) {
    io.out << services::ToJson(response) << "\n";
    return kExitOk;
  }
  Table table({"quantity", "value"});
  table.AddRow({"files read", absl::StrCat(response.files())});
  table.AddRow({"samples imported", absl::StrCat(response.imported())});
  table.AddRow({"samples already stored", absl::StrCat(response.duplicates())});
  table.AddRow({"lines skipped", absl::StrCat(response.skipped())});
  table.Print(io.out);
  if (response.errors_size() > 0) {
    io.out << "\nSkipped lines"
           << (response.errors_size() < static_cast<int>(response.skipped())
                   ? absl::StrCat(" (first ", response.errors_size(), ")")
                   : "")
           << ":\n";
    for (const std::string& e : response.errors()) io.out << "  " << e << "\n";
  }
  return kExitOk;
}

int FitCommand(const Args& args, pb::Profiler::StubInterface& stub, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "profile fit", io); };
  pb::FitProfileRequest request;
  auto name = args.Required("--name");
  if (!name.ok()) return fail(name.status());
  request.set_name(*name);
  if (auto jobs = args.Get("--jobs")) {
    for (absl::string_view j : absl::StrSplit(*jobs, ',', absl::SkipEmpty())) {
      request.add_job_ids(std::string(j));
    }
  }
  if (auto require = args.Get("--require")) {
    // "a1,b1" and "a2,b2" hold a comma: accept their names contention and memory instead.
    for (absl::string_view r : absl::StrSplit(*require, ',', absl::SkipEmpty())) {
      request.add_require(std::string(r));
    }
  }
  if (auto base = args.Get("--base")) {
    const services::DataRegistry local = services::DataRegistry::WithBuiltins();
    auto profile = local.ResolveWorkload(*base);
    if (!profile.ok()) return fail(profile.status());
    *request.mutable_base() = *std::move(profile);
  }
  if (auto ps = args.Get("--ps-bandwidth")) {
    auto v = ParseNumber("--ps-bandwidth", *ps);
    if (!v.ok()) return fail(v.status());
    request.set_parameter_server_bandwidth_mb_per_s(*v);
  }
  if (auto pcie = args.Get("--pcie-bandwidth")) {
    auto v = ParseNumber("--pcie-bandwidth", *pcie);
    if (!v.ok()) return fail(v.status());
    request.set_pcie_bandwidth_mb_per_s(*v);
  }
  pb::FitProfileResponse response;
  auto context = Context();
  if (auto s = services::FromGrpc(stub.FitProfile(context.get(), request, &response)); !s.ok()) {
    return fail(s);
  }
  if (io.json) {
    io.out << services::ToJson(response) << "\n";
    return kExitOk;
  }
  io.out << "Fitted profile " << response.profile().name() << " version "
         << response.profile().version() << "\n\n";
  Table quality({"parameter", "identified", "points", "RMSE", "R^2", "MAPE %", "note"});
  quality.LeftAlign(1);
  quality.LeftAlign(6);
  for (const pb::FitQuality& q : response.quality()) {
    const bool measured = q.identified() && q.points() > 0;
    quality.AddRow(
        {q.parameter(), q.identified() ? "yes" : "no", measured ? absl::StrCat(q.points()) : "-",
         measured ? absl::StrFormat("%.4g", q.rmse()) : "-",
         measured ? Fixed(q.r_squared(), 4) : "-", measured ? Fixed(q.mape(), 2) : "-", q.note()});
  }
  quality.Print(io.out);
  io.out << "\n";
  PrintProfile(response.profile(), io.out);
  return kExitOk;
}

absl::StatusOr<pb::WorkloadProfile> FetchProfile(const Args& args,
                                                 pb::Profiler::StubInterface& stub) {
  auto name = OnePositional(args, "profile NAME");
  if (!name.ok()) return name.status();
  auto version = VersionFlag(args);
  if (!version.ok()) return version.status();
  pb::GetProfileRequest request;
  request.set_name(*name);
  request.set_version(*version);
  pb::WorkloadProfile profile;
  auto context = Context();
  if (auto s = services::FromGrpc(stub.GetProfile(context.get(), request, &profile)); !s.ok()) {
    return s;
  }
  return profile;
}

int ShowCommand(const Args& args, pb::Profiler::StubInterface& stub, const Io& io) {
  auto profile = FetchProfile(args, stub);
  if (!profile.ok()) return ReportError(profile.status(), "profile show", io);
  if (io.json) {
    io.out << services::ToJson(*profile) << "\n";
  } else {
    PrintProfile(*profile, io.out);
  }
  return kExitOk;
}

int ExportCommand(const Args& args, pb::Profiler::StubInterface& stub, const Io& io) {
  auto profile = FetchProfile(args, stub);
  if (!profile.ok()) return ReportError(profile.status(), "profile export", io);
  const std::string json = services::ToJson(*profile, /*pretty=*/true);
  if (auto file = args.Get("--out")) {
    std::ofstream out(*file, std::ios::binary | std::ios::trunc);
    out << json << "\n";
    out.close();
    if (!out) {
      return ReportError(
          absl::PermissionDeniedError(absl::StrCat("--out = \"", *file, "\": cannot be written")),
          "profile export", io);
    }
    if (io.json) {
      io.out << "{\"exported\":" << JsonString(*file) << ",\"name\":" << JsonString(profile->name())
             << ",\"version\":" << profile->version() << "}\n";
    } else {
      io.out << "Exported profile " << profile->name() << " version " << profile->version()
             << " to " << *file << "\n";
    }
    return kExitOk;
  }
  io.out << json << "\n";
  return kExitOk;
}

int ListProfilesCommand(pb::Profiler::StubInterface& stub, const Io& io) {
  pb::ListProfilesResponse response;
  auto context = Context();
  if (auto s = services::FromGrpc(
          stub.ListProfiles(context.get(), pb::ListProfilesRequest(), &response));
      !s.ok()) {
    return ReportError(s, "profile list", io);
  }
  if (io.json) {
    io.out << services::ToJson(response) << "\n";
    return kExitOk;
  }
  Table table({"profile", "version", "S_parm (MB)", "B_req (MB/s)", "compute entries", "contention",
               "loss model", "source"});
  table.LeftAlign(5);
  table.LeftAlign(6);
  table.LeftAlign(7);
  for (const pb::WorkloadProfile& p : response.profiles()) {
    table.AddRow({p.name(), absl::StrCat(p.version()), Fixed(p.parameter_size_mb(), 2),
                  Fixed(p.required_bandwidth_mb_per_s(), 1), absl::StrCat(p.compute_size()),
                  p.has_contention() ? "yes" : "no", p.has_loss() ? "yes" : "no", p.source()});
  }
  table.Print(io.out);
  if (response.profiles_size() == 0) io.out << "(no profiles stored)\n";
  return kExitOk;
}

int DeleteCommand(const Args& args, pb::Profiler::StubInterface& stub, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "profile delete", io); };
  auto name = OnePositional(args, "profile NAME");
  if (!name.ok()) return fail(name.status());
  auto version = VersionFlag(args);
  if (!version.ok()) return fail(version.status());
  pb::DeleteProfileRequest request;
  request.set_name(*name);
  request.set_version(*version);
  pb::DeleteProfileResponse response;
  auto context = Context();
  if (auto s = services::FromGrpc(stub.DeleteProfile(context.get(), request, &response)); !s.ok()) {
    return fail(s);
  }
  if (io.json) {
    io.out << services::ToJson(response) << "\n";
  } else {
    io.out << "Deleted " << response.deleted() << " version(s) of " << *name << "\n";
  }
  return kExitOk;
}

std::string JsonNumber(double v) { return absl::StrFormat("%.6g", v); }

}  // namespace

std::string DefaultProfileDb() {
  if (const char* env = std::getenv("SPOTDNN_PROFILE_DB"); env != nullptr && *env != '\0') {
    return env;
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return (std::filesystem::path(home) / ".spotdnn" / "profiles.db").string();
  }
  return "spotdnn-profiles.db";
}

absl::string_view ProfileUsage() { return kProfileUsage; }

int ValidateSpeedCommand(const Args& args, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "profile validate-speed", io); };
  auto runs = args.Required("--runs");
  if (!runs.ok()) return fail(runs.status());
  auto fit_text = args.Required("--fit-workers");
  if (!fit_text.ok()) return fail(fit_text.status());
  std::vector<int> fit_workers;
  for (absl::string_view part : absl::StrSplit(*fit_text, ',')) {
    auto n = ParseInt("--fit-workers", part, 1, 100000);
    if (!n.ok()) return fail(n.status());
    fit_workers.push_back(*n);
  }
  const std::vector<std::string> dirs = absl::StrSplit(*runs, ',', absl::SkipEmpty());
  std::vector<profiler::SpeedSeries> series;
  std::uint64_t skipped = 0;
  std::vector<std::string> errors;
  for (const std::string& dir : dirs) {
    profiler::ImportOptions options;
    // Several folders: name each series after its folder too ("k80/res15k80").
    if (dirs.size() > 1) {
      options.job_id = std::filesystem::path(dir).lexically_normal().filename().string();
      if (options.job_id.empty()) {
        options.job_id =
            std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
      }
    }
    auto imported = profiler::ImportPath(dir, options);
    if (!imported.ok()) {
      return fail(absl::Status(imported.status().code(),
                               absl::StrCat("--runs: ", imported.status().message())));
    }
    skipped += imported->skipped;
    errors.insert(errors.end(), imported->errors.begin(), imported->errors.end());
    for (profiler::SpeedSeries& s : profiler::SpeedSeriesFromSamples(imported->samples)) {
      series.push_back(std::move(s));
    }
  }
  auto validation = profiler::ValidateSpeed(series, fit_workers);
  if (!validation.ok()) {
    const absl::Status& s = validation.status();
    return fail(absl::Status(s.code(), s.code() == absl::StatusCode::kInvalidArgument
                                           ? absl::StrCat("--", s.message())
                                           : std::string(s.message())));
  }
  if (io.json) {
    std::vector<std::string> series_json;
    for (const profiler::SeriesValidation& v : validation->series) {
      std::vector<std::string> points;
      for (const profiler::SpeedPoint& p : v.points) {
        points.push_back(absl::StrCat(
            "{\"workers\":", p.workers, ",\"observed\":", JsonNumber(p.observed),
            ",\"predicted\":", JsonNumber(p.predicted), ",\"error_pct\":", JsonNumber(p.error_pct),
            ",\"held_out\":", p.held_out ? "true" : "false", "}"));
      }
      const profiler::SpeedCurve& c = v.fit.curve;
      series_json.push_back(absl::StrCat(
          "{\"series\":", JsonString(v.series), ",\"held_out_mape\":", JsonNumber(v.held_out_mape),
          ",\"held_out_points\":", v.held_out_points, ",\"fit\":{\"step_time_s\":",
          JsonNumber(c.step_time_s), ",\"comm_share\":", JsonNumber(c.comm_share),
          ",\"bandwidth_ratio\":", JsonNumber(c.bandwidth_ratio),
          ",\"a1\":", JsonNumber(c.contention.a1), ",\"b1\":", JsonNumber(c.contention.b1),
          ",\"fit_mape\":", JsonNumber(v.fit.quality.mape), "},\"points\":[",
          absl::StrJoin(points, ","), "]}"));
    }
    io.out << "{\"fit_workers\":[" << absl::StrJoin(fit_workers, ",") << "],\"series\":["
           << absl::StrJoin(series_json, ",") << "],\"skipped_lines\":" << skipped
           << ",\"held_out_points\":" << validation->held_out_points
           << ",\"overall_mape\":" << JsonNumber(validation->overall_mape) << "}\n";
    return kExitOk;
  }
  io.out << "Cluster speed (global steps/s): fitted on " << absl::StrJoin(fit_workers, ",")
         << " workers, the other counts held out\n\n";
  Table points({"series", "workers", "role", "observed", "predicted", "error %"});
  points.LeftAlign(2);
  for (const profiler::SeriesValidation& v : validation->series) {
    for (const profiler::SpeedPoint& p : v.points) {
      points.AddRow({v.series, absl::StrCat(p.workers), p.held_out ? "held out" : "fit",
                     Fixed(p.observed, 3), Fixed(p.predicted, 3), Fixed(p.error_pct, 2)});
    }
  }
  points.Print(io.out);
  io.out << "\n";
  Table per_series({"series", "T_1 (s)", "comm share c", "B_ps/B_req r", "fit MAPE %",
                    "held-out points", "held-out MAPE %"});
  for (const profiler::SeriesValidation& v : validation->series) {
    per_series.AddRow({v.series, Fixed(v.fit.curve.step_time_s, 4),
                       Fixed(v.fit.curve.comm_share, 3), Fixed(v.fit.curve.bandwidth_ratio, 2),
                       Fixed(v.fit.quality.mape, 2), absl::StrCat(v.held_out_points),
                       Fixed(v.held_out_mape, 2)});
  }
  per_series.Print(io.out);
  io.out << "\nModel: eqs. 2, 6-9 for identical workers, v(N) = N / (T_1 (1 - c + c B_req/B_wk(N)))"
            ", P = 1 once B_req > B_ps/N; observed = median of each run's samples.\n";
  if (skipped > 0) {
    io.out << "Skipped " << skipped << " malformed line(s)"
           << (errors.empty() ? "" : absl::StrCat("; first: ", errors[0])) << "\n";
  }
  io.out << absl::StrFormat("overall held-out MAPE: %.2f%% over %d points\n",
                            validation->overall_mape, validation->held_out_points);
  return kExitOk;
}

int Profile(const std::string& subcommand, const Args& args, pb::Profiler::StubInterface& stub,
            const Io& io) {
  if (subcommand == "import") return ImportCommand(args, stub, io);
  if (subcommand == "fit") return FitCommand(args, stub, io);
  if (subcommand == "show") return ShowCommand(args, stub, io);
  if (subcommand == "list") return ListProfilesCommand(stub, io);
  if (subcommand == "export") return ExportCommand(args, stub, io);
  if (subcommand == "delete") return DeleteCommand(args, stub, io);
  return ReportError(absl::InvalidArgumentError(absl::StrCat(
                         "unknown subcommand \"", subcommand,
                         "\": expected import, fit, show, list, export, delete or validate-speed")),
                     "profile", io);
}

int ProfileCommand(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const bool json = std::find(argv.begin(), argv.end(), "--json") != argv.end();
  Io io{out, err, json};
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    (argv.empty() ? err : out) << kProfileUsage;
    return argv.empty() ? kExitBadInput : kExitOk;
  }
  const std::string sub = argv[0];
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  if (std::find(rest.begin(), rest.end(), "--help") != rest.end()) {
    out << kProfileUsage;
    return kExitOk;
  }
  FlagSpec spec{.values = {"--server", "--db"}, .switches = {"--json"}};
  if (sub == "import") {
    spec.values.insert(
        {"--job", "--format", "--instance-type", "--gpu-type", "--gpus", "--batch", "--workers"});
    spec.switches.insert("--stop-on-error");
  } else if (sub == "fit") {
    spec.values.insert(
        {"--name", "--jobs", "--base", "--ps-bandwidth", "--pcie-bandwidth", "--require"});
  } else if (sub == "show" || sub == "delete") {
    spec.values.insert("--version");
  } else if (sub == "export") {
    spec.values.insert({"--version", "--out"});
  } else if (sub == "validate-speed") {
    spec.values = {"--runs", "--fit-workers"};
  } else if (sub != "list") {
    ReportError(absl::InvalidArgumentError(absl::StrCat(
                    "unknown subcommand \"", sub,
                    "\": expected import, fit, show, list, export, delete or validate-speed")),
                "profile", io);
    err << kProfileUsage;
    return kExitBadInput;
  }
  auto args = Args::Parse(rest, spec);
  if (!args.ok()) {
    ReportError(args.status(), "profile " + sub, io);
    err << kProfileUsage;
    return kExitBadInput;
  }
  if (sub == "validate-speed") return ValidateSpeedCommand(*args, io);
  if (sub == "list" || sub == "fit") {
    if (!args->positional().empty()) {
      return ReportError(absl::InvalidArgumentError(
                             absl::StrCat("unexpected argument \"", args->positional()[0], "\"")),
                         "profile " + sub, io);
    }
  }
  auto connection = ConnectProfiler(*args);
  if (!connection.ok()) return ReportError(connection.status(), "profile " + sub, io);
  return Profile(sub, *args, *connection->stub, io);
}

}  // namespace spotdnn::gateway
