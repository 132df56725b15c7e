// spotdnn profile: import logs, fit, store, show and export workload profiles; the subcommand
// table. validate and validate-speed are in profile_validate_command.cc.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "profiler/importers.h"
#include "profiler/profile_store.h"
#include "services/clients/service_clients.h"
#include "services/common/convert.h"
#include "services/common/server.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/output.h"
#include "services/gateway/cli/stored_profiles.h"
#include "services/profiler/profiler_service.h"

namespace spotdnn::gateway {
namespace {

// A percentage to three significant digits ("1.57", "0.05", "0.00123"): a small error keeps its
// digits instead of reading "0.00".
std::string Percent(double pct) { return absl::StrFormat("%.3g", pct); }

// Imports and fits of large logs may take minutes.
clients::ProfilerClient ClientOf(pb::Profiler::StubInterface& stub) {
  return clients::ProfilerClient(stub, clients::CallPolicy::LongRunning());
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
  if (p.sync() == pb::SYNC_KIND_ALLREDUCE) summary.AddRow({"training", "synchronous all-reduce"});
  summary.AddRow({"model variant", services::EnumLabel(p.model_variant())});
  summary.AddRow(
      {"S_parm (MB)", p.parameter_size_mb() > 0 ? Fixed(p.parameter_size_mb(), 3) : "-"});
  summary.AddRow({"B_req (MB/s)", p.required_bandwidth_mb_per_s() > 0
                                      ? Fixed(p.required_bandwidth_mb_per_s(), 2)
                                      : "-"});
  if (p.model_variant() == pb::MODEL_VARIANT_SHARED_PS) {
    summary.AddRow({"PS queueing kappa",
                    p.has_shared_ps() ? absl::StrFormat("%.4f", p.shared_ps().queueing()) : "-"});
  }
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
  if (p.allreduce_size() > 0) {
    // The synchronous step time per GPU type (predictor/allreduce.h has the form).
    out << "\n";
    Table sync({"GPU type", "a_c (s)", "b_c (s)", "d", "a_r (s)", "b_r (s)", "a_n (s)", "b_s (s)",
                "c_k (s)", "e_2 (s)", "gamma"});
    sync.LeftAlign(0);
    auto g = [](double v) { return absl::StrFormat("%.4g", v); };
    for (const pb::AllReduceModel& m : p.allreduce()) {
      const bool cross = m.cross_instance();
      sync.AddRow({m.gpu_type(), g(m.compute_fixed_s()), g(m.compute_per_sample_s()),
                   g(m.compute_contention()), g(m.intra_fixed_s()), g(m.intra_ring_s()),
                   cross ? g(m.cross_fixed_s()) : "-", cross ? g(m.cross_straggler_s()) : "-",
                   cross ? g(m.cross_per_gpu_s()) : "-", cross ? g(m.cross_pair_s()) : "-",
                   g(m.overlap_gamma())});
    }
    sync.Print(out);
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
    auto put = ClientOf(stub).PutProfile(*profile);
    if (!put.ok()) return fail(put.status());
    const pb::WorkloadProfile& stored = *put;
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
  if (args.Has("--batch") && args.Has("--batch-size")) {
    return fail(
        absl::InvalidArgumentError("--batch and --batch-size: give one (they are the same)"));
  }
  request.set_cluster(args.Get("--cluster").value_or(""));
  for (const auto& [flag, setter] :
       std::vector<std::pair<const char*, void (pb::ImportLogRequest::*)(int32_t)>>{
           {"--gpus", &pb::ImportLogRequest::set_gpus},
           {"--batch", &pb::ImportLogRequest::set_batch_size},
           {"--batch-size", &pb::ImportLogRequest::set_batch_size},
           {"--workers", &pb::ImportLogRequest::set_cluster_workers},
           {"--parameter-servers", &pb::ImportLogRequest::set_parameter_servers}}) {
    if (auto v = args.Get(flag)) {
      auto parsed = ParseInt(flag, *v, 1, 1'000'000);
      if (!parsed.ok()) return fail(parsed.status());
      (request.*setter)(*parsed);
    }
  }
  std::error_code ec;
  const bool from_stdin = *path == "-";
  const bool folder = !from_stdin && std::filesystem::is_directory(*path, ec);
  const bool regular = !from_stdin && std::filesystem::is_regular_file(*path, ec);
  if (!from_stdin && !std::filesystem::exists(*path, ec)) {
    return fail(
        absl::NotFoundError(absl::StrCat("PATH = \"", *path, "\": no such file or folder")));
  }
  if (from_stdin || (!folder && (!regular || args.Has("--server")))) {
    // Standard input ("-"), a pipe or a device (/dev/stdin) can only be read here, and a remote
    // server cannot read this machine's files: send the content. (The in-process profiler reads a
    // regular file itself, so that its folder's name and a vm_data.csv beside it count.)
    absl::StatusOr<std::string> content;
    if (from_stdin) {
      std::ostringstream buffer;
      buffer << std::cin.rdbuf();
      content = buffer.str();
    } else {
      content = services::ReadFile(*path);
    }
    if (!content.ok()) return fail(content.status());
    if (content->empty()) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "PATH = \"", *path, "\": empty", from_stdin ? " (nothing on standard input)" : "")));
    }
    request.set_content(*std::move(content));
    request.set_path(from_stdin ? "stdin" : *path);
    if (request.job_id().empty()) {
      // The job of samples whose lines name none (sample lines with a job_id keep theirs).
      request.set_job_id(from_stdin || !regular ? "stdin"
                                                : std::filesystem::path(*path).stem().string());
    }
  } else {
    request.set_path(std::filesystem::absolute(*path, ec).string());
  }
  auto imported = ClientOf(stub).ImportLog(request);
  if (!imported.ok()) return fail(imported.status());
  const pb::ImportLogResponse& response = *imported;
  if (response.imported() == 0 && response.skipped() == 0 && response.duplicates() == 0) {
    io.err << "spotdnn profile import: nothing imported from " << *path
           << ": it holds no SPOTDNN_SAMPLE lines and no rows of a known log format (see "
              "--format)\n";
  }
  if (io.json) {
    io.out << services::ToJson(response) << "\n";
    return kExitOk;
  }
  Table table({"quantity", "value"});
  table.AddRow({"files read", absl::StrCat(response.files())});
  // `imported` counts the samples already stored too (the service's answer says so): a re-import
  // reads "0 new, 1309 already stored", not 1309 imported beside 1309 already stored.
  const uint64_t duplicates = std::min(response.duplicates(), response.imported());
  table.AddRow({"samples imported", absl::StrCat(response.imported() - duplicates, " new, ",
                                                 duplicates, " already stored")});
  table.AddRow({"runs (jobs)", absl::StrCat(response.runs())});
  table.AddRow({"lines skipped", absl::StrCat(response.skipped())});
  table.Print(io.out);
  if (response.notes_size() > 0) {
    io.out << "\nNotes:\n";
    for (const std::string& n : response.notes()) io.out << "  " << n << "\n";
  }
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
  if (auto variant = args.Get("--model-variant")) {
    auto v = predictor::ParseVariant(*variant);
    if (!v.ok()) return fail(absl::InvalidArgumentError(absl::StrCat("--", v.status().message())));
    request.set_model_variant(services::ToProto(*v));
  }
  auto fitted = ClientOf(stub).FitProfile(request);
  if (!fitted.ok()) return fail(fitted.status());
  const pb::FitProfileResponse& response = *fitted;
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
    const bool counted = q.identified() && q.points() > 0;
    // A row that only counts (the runs) has no residuals: "-", not zeros.
    const bool measured = counted && (q.rmse() > 0 || q.r_squared() != 0 || q.mape() > 0);
    quality.AddRow(
        {q.parameter(), q.identified() ? "yes" : "no", counted ? absl::StrCat(q.points()) : "-",
         measured ? absl::StrFormat("%.4g", q.rmse()) : "-",
         measured ? Fixed(q.r_squared(), 4) : "-", measured ? Percent(q.mape()) : "-", q.note()});
  }
  quality.Print(io.out);
  io.out << "\n";
  if (response.spread_size() > 0) {
    // The synchronous fit's parameters with their standard errors.
    Table spread({"parameter", "value", "sd (1 sigma)", "sd %"});
    spread.LeftAlign(0);
    for (const pb::ParameterSpread& q : response.spread()) {
      spread.AddRow({q.parameter(), absl::StrFormat("%.4g", q.value()),
                     absl::StrFormat("%.2g", q.sd()),
                     q.value() != 0 ? Fixed(100 * q.sd() / std::fabs(q.value()), 1) : "-"});
    }
    spread.Print(io.out);
    io.out << "\n";
  }
  if (response.worst_residuals_size() > 0) {
    io.out << "Worst residuals (largest relative error first):\n";
    Table worst({"fit", "placement", "local batch", "measured (s)", "fitted (s)", "error %"});
    worst.LeftAlign(0);
    worst.LeftAlign(1);
    for (const pb::FitResidual& r : response.worst_residuals()) {
      worst.AddRow({r.parameter(), r.configuration(), absl::StrFormat("%g", r.local_batch()),
                    absl::StrFormat("%.4g", r.measured_s()), absl::StrFormat("%.4g", r.fitted_s()),
                    Fixed(r.error_pct(), 1)});
    }
    worst.Print(io.out);
    io.out << "\n";
  }
  PrintProfile(response.profile(), io.out);
  const pb::WorkloadProfile& p = response.profile();
  if (p.sync() != pb::SYNC_KIND_ALLREDUCE && p.model_variant() != pb::MODEL_VARIANT_SHARED_PS &&
      !p.has_contention()) {
    // What `predict` and `plan` will say of it: say it here, with the fix.
    io.out << "\nNo contention model (a1, b1): `spotdnn predict` and `spotdnn plan` answer\n"
              "FAILED_PRECONDITION for this profile. The fit identifies a1, b1 only from runs "
              "whose workers\nshare the parameter server (more workers than B_ps / B_req, with "
              "--ps-bandwidth B_ps);\nimport such runs and fit again, or fit with --base W to "
              "take a1, b1 from a built-in profile\n(spotdnn workloads).\n";
  }
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
  return ClientOf(stub).GetProfile(request.name(), request.version());
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
  auto listed = ClientOf(stub).ListProfiles();
  if (!listed.ok()) return ReportError(listed.status(), "profile list", io);
  const pb::ListProfilesResponse& response = *listed;
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
  auto deleted = ClientOf(stub).DeleteProfile(request);
  if (!deleted.ok()) return fail(deleted.status());
  const pb::DeleteProfileResponse& response = *deleted;
  if (io.json) {
    io.out << services::ToJson(response) << "\n";
  } else {
    io.out << "Deleted " << Plural(response.deleted(), "version", "versions") << " of " << *name
           << "\n";
  }
  return kExitOk;
}

}  // namespace

int Profile(const std::string& subcommand, const Args& args, pb::Profiler::StubInterface& stub,
            const Io& io) {
  if (subcommand == "import") return ImportCommand(args, stub, io);
  if (subcommand == "fit") return FitCommand(args, stub, io);
  if (subcommand == "show") return ShowCommand(args, stub, io);
  if (subcommand == "list") return ListProfilesCommand(stub, io);
  if (subcommand == "export") return ExportCommand(args, stub, io);
  if (subcommand == "delete") return DeleteCommand(args, stub, io);
  if (subcommand == "validate") return ProfileValidateCommand(args, stub, io);
  return ReportError(
      absl::InvalidArgumentError(absl::StrCat(
          "unknown subcommand \"", subcommand,
          "\": expected import, fit, show, list, export, delete, validate or validate-speed")),
      "profile", io);
}

namespace {

FlagHelp DbFlag() {
  return {"--db", "FILE",
          "the profile database (default: DATA_DIR/profiles.db, the one the stack's\n"
          "spotdnn-profiler serves)"};
}

// A subcommand served by the profiler (remote with --server, else in-process over the profile
// database: the same file whether or not the stack is up).
Command ProfilerCommand(Command command) {
  command.flags.push_back(DataDirFlag());
  command.flags.push_back(DbFlag());
  FlagHelp server = ServerFlag("spotdnn-profiler");
  if (command.name == "profile import") {
    server.help +=
        ";\nit is sent a file's content, and a folder's path, which it reads only\n"
        "under its --import_root";
  }
  command.flags.push_back(std::move(server));
  const std::string sub = command.name.substr(std::string("profile ").size());
  command.run = [sub, name = command.name](const Args& args, const Io& io) {
    auto connection = ConnectProfiler(args, "--server", /*create=*/true);
    if (!connection.ok()) return ReportError(connection.status(), name, io);
    return Profile(sub, args, *connection->stub, io);
  };
  return command;
}

}  // namespace

std::vector<Command> ProfileCommands() {
  return {
      {.name = "profile",
       .summary = "import training logs, fit, store and export workload profiles; validate-speed",
       .description =
           "The profiler turns training logs and live samples into workload profiles the model "
           "can use,\nkeeps them (versioned) in a database, and shows how well the fitted model "
           "predicts cluster\nsizes it never saw. Profiles and samples are kept in "
           "DATA_DIR/profiles.db (--data-dir D, else\n$SPOTDNN_HOME, else ~/.spotdnn): the "
           "database the stack's spotdnn-profiler serves, so they are the\nsame whether or not "
           "`spotdnn up` runs; --db FILE names another file, --server HOST:PORT a\nrunning "
           "spotdnn-profiler. Exit status: 0 ok, 1 service failure, 2 bad input (including\n"
           "FAILED_PRECONDITION and NOT_FOUND)."},
      ProfilerCommand(
          {.name = "profile import",
           .summary = "import training logs (a file or a folder) as samples; a .json profile",
           .synopsis = "PATH|- [--job ID] [--format F] [--stop-on-error] [--instance-type T]\n"
                       "[--gpu-type G] [--gpus N] [--batch-size B] [--workers N] "
                       "[--parameter-servers P]\n[--cluster TYPE=N,...] [--data-dir D | --db FILE "
                       "| --server "
                       "HOST:PORT]",
           .description =
               "Imports PATH (a file, or every *.csv, *.log, *.txt, *.tsv under a folder; - is "
               "standard input) as\nsamples; a .json file is a workload profile and is stored as "
               "the next version of its name.\nSamples whose lines name no job get --job, else the "
               "file's name (\"stdin\" for standard input).\nA checkpoint export\n\"Wall "
               "Time,Step,Accuracy[,Zone],Run\" gives one "
               "job per run (ID/run-3, ID/ZONE/run-3), its speed\nfrom steps and wall times; a "
               "vm_data.csv beside it leaves out runs that lost a worker mid-run.\nWhat the file "
               "does not say comes from the flags (a <series>worker<N> or <P>ps<N><g> folder\n"
               "gives workers, servers, GPU); a value the file says otherwise is an error naming "
               "both.",
           .flags = {{"--job", "ID",
                      "job the samples belong to (a folder: prefix of its run folders' jobs)"},
                     {"--format", "F", "auto (default), tensorboard, spotdnn-worker, csv, samples"},
                     {"--stop-on-error", "", "stop at the first malformed line and import nothing"},
                     {"--instance-type", "T", "the instance type the log lacks"},
                     {"--gpu-type", "G", "the GPU type the log lacks"},
                     {"--gpus", "N", "GPUs per worker the log lacks"},
                     {"--batch-size", "B", "the batch size the log lacks"},
                     {"--batch", "B", "the same as --batch-size"},
                     {"--workers", "N",
                      "the cluster's workers (a <series>worker<N> folder gives it)"},
                     {"--parameter-servers", "P", "the parameter servers the runs trained against"},
                     {"--cluster", "TYPE=N,...",
                      "a run on several types: workers per type (instead of --instance-type,\n"
                      "--gpu-type and --workers)"}},
           .min_positional = 1,
           .max_positional = 1}),
      ProfilerCommand(
          {.name = "profile fit",
           .summary = "fit a profile from the stored samples and store it as a new version",
           .synopsis = "--name NAME [--jobs ID,...] [--base W] [--ps-bandwidth MB/S]\n"
                       "[--pcie-bandwidth MB/S] [--model-variant V] [--require P,...]\n"
                       "[--data-dir D | --db FILE | --server HOST:PORT]",
           .flags = {{"--name", "NAME", "the profile to store (its next version)"},
                     {"--jobs", "ID[,ID...]",
                      "samples of these jobs only, a job with its runs (default: all)"},
                     {"--base", "W",
                      "built-in workload or JSON file whose values the fit keeps and fills"},
                     {"--ps-bandwidth", "MB/S",
                      "each parameter server's bandwidth B_ps the runs trained against (needed\n"
                      "for the contention model)"},
                     {"--pcie-bandwidth", "MB/S", "B_pcie (default 10000)"},
                     {"--model-variant", "V",
                      "shared-ps (one compute time per type plus one parameter-server model\n"
                      "shared by every run, fitted to runs of several sizes, types and server\n"
                      "counts), paper (eqs. 8-9) or spotdnn-prototype; default: the base's,\n"
                      "else shared-ps when the runs identify it and not a1, b1, else paper"},
                     {"--require", "P[,P...]",
                      "fail unless these are identified: S_parm, B_req, T_comp, contention,\n"
                      "memory, loss, ps (shared-ps), kappa"}}}),
      ProfilerCommand(
          {.name = "profile validate",
           .summary = "fit on some jobs, predict the clusters of others: observed vs predicted",
           .synopsis = "--fit ID[,ID...] --check ID[,ID...] [--ps-bandwidth MB/S] "
                       "[--model-variant V]\n[--base W] [--iterations N] [--data-dir D | --db FILE "
                       "| --server "
                       "HOST:PORT]",
           .description =
               "Fits on the first jobs (and their runs) and predicts every cluster of the second "
               "from its\ncomposition (types, counts, servers): observed and predicted steps/s and "
               "time per cluster,\nand the MAPE of the time.",
           .flags = {{"--fit", "ID[,ID...]", "the jobs to fit on"},
                     {"--check", "ID[,ID...]", "the jobs whose clusters are predicted"},
                     {"--ps-bandwidth", "MB/S", "as for fit"},
                     {"--model-variant", "V", "as for fit"},
                     {"--base", "W", "as for fit"},
                     {"--iterations", "N",
                      "compare the time of N steps (default: the steps the runs took)"}}}),
      ProfilerCommand(
          {.name = "profile show",
           .summary = "a stored profile's parameters",
           .synopsis = "NAME [--version V] [--data-dir D | --db FILE | --server HOST:PORT]",
           .flags = {{"--version", "V", "that version (default: the latest)"}},
           .min_positional = 1,
           .max_positional = 1}),
      ProfilerCommand({.name = "profile list",
                       .summary = "the latest version of every stored profile",
                       .synopsis = "[--data-dir D | --db FILE | --server HOST:PORT]"}),
      ProfilerCommand(
          {.name = "profile export",
           .summary = "a profile as JSON, the shape `spotdnn predict --workload FILE` reads",
           .synopsis =
               "NAME [--version V] [--out FILE] [--data-dir D | --db FILE | --server HOST:PORT]",
           .flags = {{"--version", "V", "that version (default: the latest)"},
                     {"--out", "FILE", "write it there (default: standard output)"}},
           .min_positional = 1,
           .max_positional = 1}),
      ProfilerCommand(
          {.name = "profile delete",
           .summary = "delete one version of a profile (default: every version)",
           .synopsis = "NAME [--version V] [--data-dir D | --db FILE | --server HOST:PORT]",
           .flags = {{"--version", "V", "only that version"}},
           .min_positional = 1,
           .max_positional = 1}),
      {.name = "profile validate-speed",
       .summary = "fit the cluster-speed model on some worker counts, predict the others",
       .synopsis = "--runs DIR[,DIR...] --fit-workers N,N,N[,...] [--model shared-ps|paper]\n"
                   "--sync --runs FILE[,FILE...] --gpu-type T [--max-gpus N] [--json]",
       .description = "For every <series>worker<N> series in DIR: fits the cluster-speed model on "
                      "the listed worker\ncounts only, predicts the others, and prints observed, "
                      "predicted and error per point,\nper-series MAPE and the overall held-out "
                      "MAPE. It reads the files itself (no server).\nshared-ps (default): "
                      "compute time z and server time d per series, one queueing kappa\nfor all; "
                      "paper: eqs. 2, 6-9 per series.\n--sync: the synchronous "
                      "all-reduce model of synchronous runs (Pollux / Sia throughput\nfiles, "
                      "SPOTDNN_SAMPLE lines with a placement) fitted on the runs of at most "
                      "--max-gpus\nGPUs, predicting every larger run spread evenly over its "
                      "instances, beside Pollux's\nform fitted on the same runs.",
       .flags = {{"--runs", "DIR[,DIR...]", "folders of <series>worker<N> run folders"},
                 {"--fit-workers", "N,N,N", "the worker counts to fit on (3 or more)"},
                 {"--model", "M", "shared-ps (default) or paper"},
                 {"--sync", "", "validate the synchronous all-reduce model instead"},
                 {"--gpu-type", "T", "--sync: the GPUs of the runs (e.g. T4)"},
                 {"--max-gpus", "N", "--sync: fit on the runs of at most N GPUs (default 4)"}},
       .run = ValidateSpeedCommand},
      {.name = "profile validate-convergence",
       .summary = "fit the convergence model on some cluster sizes, predict the steps of others",
       .synopsis = "--runs PATH[@N][,PATH[@N]...] --targets METRIC>=V[,V...] [--fit-sizes N,N] "
                   "[--form saturating|eq3] [--schedule detect|S] [--by-batch]",
       .description =
           "Reads the runs' metric curves (files or folders; @N gives the workers of runs whose "
           "folder\nname does not say), fits the convergence model on the --fit-sizes (default: "
           "each size\nleft out in turn, fitted on all the others) and prints, per held-out size "
           "and target,\nthe observed steps (median over the runs, interpolated between "
           "evaluations), the\npredicted p50 and 80% interval, the error and the MAPE. It reads "
           "the files itself.\n--form eq3 --schedule constant is the paper's eq. 3 as written.",
       .flags = {{"--runs", "PATH[@N],...", "run files or folders, @N = workers when not said"},
                 {"--targets", "METRIC>=V,V", "e.g. accuracy>=0.80,0.85,0.88 or loss<=0.5,0.3"},
                 {"--fit-sizes", "N,N", "cluster sizes to fit on (default: leave one out)"},
                 {"--form", "F", "saturating (default) or eq3"},
                 {"--schedule", "S", "detect (default), constant, step:32000*0.1, cosine:H"},
                 {"--by-batch", "",
                  "steps against the global batch instead (runs at several global batches, "
                  "e.g.\nPollux's validation-<B>.csv): each batch left out in turn"}},
       .run = ValidateConvergenceCommand},
  };
}

}  // namespace spotdnn::gateway
