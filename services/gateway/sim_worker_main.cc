// spotdnn-sim-worker: a stand-in for a training process that trains nothing. Started by the
// launcher as a job's worker command, it "trains" at the pace the plan predicts for its instance
// (SPOTDNN_PREDICTED_ITERATION_S, which `spotdnn run` sets) and reports every iteration to the
// profiler (SPOTDNN_PROFILER) exactly as a real worker's reporting hook would; as a parameter
// server (SPOTDNN_ROLE=ps) it waits. SIGTERM or SIGINT: it reports what is left and exits 0.
// With --loss_curve it also reports a loss that follows a known curve in the job's global step
// (the profiler's count of every worker's steps), for tests of the live convergence refit.
// For demos and end-to-end tests of `spotdnn run` on the local provider. Against a secured
// profiler it takes the agent's client flags (--tls_ca, --tls_cert, --tls_key, --auth_token_file).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "services/common/program.h"
#include "services/common/security_flags.h"
#include "services/common/server.h"
#include "spdlog/spdlog.h"
#include "spotdnn/v1/profiler.grpc.pb.h"

ABSL_FLAG(double, iteration_time_s, 0,
          "seconds per iteration (default: $SPOTDNN_PREDICTED_ITERATION_S)");
ABSL_FLAG(std::string, profiler, "", "host:port of the profiler (default: $SPOTDNN_PROFILER)");
ABSL_FLAG(absl::Duration, report_interval, absl::Milliseconds(500),
          "how often finished iterations are sent to the profiler");
ABSL_FLAG(int64_t, max_steps, 0, "stop after this many iterations (0: until stopped)");
ABSL_FLAG(std::string, loss_curve, "",
          "A,B,C: report loss A / (j + B) + C at the job's global step j (the same curve "
          "whatever the cluster); empty: no loss");
ABSL_FLAG(double, loss_noise, 0, "standard deviation of Gaussian noise added to each loss");

namespace {

namespace pb = spotdnn::v1;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// Sends `pending` in one ReportSamples stream; keeps them when the profiler cannot be reached.
void Report(pb::Profiler::Stub& stub, std::vector<pb::Sample>& pending) {
  if (pending.empty()) return;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  pb::ReportSamplesResponse response;
  auto writer = stub.ReportSamples(&context, &response);
  for (const pb::Sample& s : pending) {
    if (!writer->Write(s)) break;
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) {
    spdlog::warn("profiler unreachable ({}); {} samples kept for the next report",
                 status.error_message(), pending.size());
    return;
  }
  if (response.rejected() > 0) {
    spdlog::error("profiler rejected {} samples: {}", response.rejected(),
                  response.errors_size() > 0 ? response.errors(0) : "");
  }
  pending.clear();
}

}  // namespace

// Set by a SIGTERM/SIGINT delivered to a thread that does not block them (a sanitizer's runtime
// starts threads before main blocks them): the loops below take it like one sigtimedwait took.
std::atomic<int> g_signalled{0};
void OnSignal(int) { g_signalled.store(1); }

// Waits up to `timeout` for SIGTERM/SIGINT: true when one came.
bool WaitForSignal(const sigset_t& signals, absl::Duration timeout) {
  timespec t = absl::ToTimespec(timeout);
  return sigtimedwait(&signals, nullptr, &t) > 0 || g_signalled.exchange(0) != 0;
}

int main(int argc, char** argv) {
  spotdnn::services::BlockShutdownSignals();
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  spotdnn::services::ParseProgramCommandLine(
      argc, argv, "spotdnn-sim-worker",
      "A simulated training worker: iterates at the predicted pace and reports to the profiler.");
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);

  if (Env("SPOTDNN_ROLE") == "ps") {
    while (!WaitForSignal(signals, absl::Milliseconds(200))) {
    }
    return 0;
  }
  double iteration_s = absl::GetFlag(FLAGS_iteration_time_s);
  if (iteration_s <= 0 && !absl::SimpleAtod(Env("SPOTDNN_PREDICTED_ITERATION_S"), &iteration_s)) {
    iteration_s = 0;
  }
  if (!(iteration_s > 0) || iteration_s > 3600) {
    spdlog::error(
        "iteration time = {}: give --iteration_time_s or SPOTDNN_PREDICTED_ITERATION_S "
        "(seconds, > 0 and <= 3600)",
        iteration_s);
    return 2;
  }
  std::string profiler = absl::GetFlag(FLAGS_profiler);
  if (profiler.empty()) profiler = Env("SPOTDNN_PROFILER");
  if (profiler.find(':') == std::string::npos) {
    spdlog::error("profiler = \"{}\": give --profiler or SPOTDNN_PROFILER as HOST:PORT", profiler);
    return 2;
  }
  const std::string job = Env("SPOTDNN_JOB_ID");
  const std::string worker = Env("SPOTDNN_INSTANCE_ID");
  if (job.empty() || worker.empty()) {
    spdlog::error("SPOTDNN_JOB_ID and SPOTDNN_INSTANCE_ID must be set (the launcher sets them)");
    return 2;
  }
  // A secured profiler: --tls_ca (TLS), --tls_cert/--tls_key (mutual TLS), --auth_token_file.
  if (auto s =
          spotdnn::services::SetDefaultClientSecurity(spotdnn::services::ClientSecurityFromFlags());
      !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }
  int batch = 0;
  (void)absl::SimpleAtoi(Env("SPOTDNN_BATCH_SIZE"), &batch);
  auto stub = pb::Profiler::NewStub(spotdnn::services::MakeChannel(profiler));
  // The known loss curve, in the job's global step.
  std::vector<double> curve;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_loss_curve), ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || !std::isfinite(v)) {
      spdlog::error("--loss_curve = \"{}\": give A,B,C (numbers)", absl::GetFlag(FLAGS_loss_curve));
      return 2;
    }
    curve.push_back(v);
  }
  if (!curve.empty() && curve.size() != 3) {
    spdlog::error("--loss_curve = \"{}\": give three numbers A,B,C",
                  absl::GetFlag(FLAGS_loss_curve));
    return 2;
  }
  int workers = 1;
  if (!absl::SimpleAtoi(Env("SPOTDNN_WORKERS"), &workers) || workers < 1) workers = 1;
  std::mt19937 rng(std::hash<std::string>()(worker));
  std::normal_distribution<double> noise(0, std::max(0.0, absl::GetFlag(FLAGS_loss_noise)));
  // The job's global steps as the profiler last counted them, and this worker's step then.
  int64_t global_at_poll = 0, own_at_poll = 0;
  auto poll_global = [&](int64_t own) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    pb::GetJobProgressRequest request;
    request.set_job_id(job);
    pb::GetJobProgressResponse response;
    if (stub->GetJobProgress(&context, request, &response).ok()) {
      global_at_poll = response.total_steps();
      own_at_poll = own;
    }
  };

  const absl::Time start = absl::Now();
  const absl::Duration per_step = absl::Seconds(iteration_s);
  const absl::Duration interval = absl::GetFlag(FLAGS_report_interval);
  const int64_t max_steps = absl::GetFlag(FLAGS_max_steps);
  std::vector<pb::Sample> pending;
  int64_t step = 0;
  bool stop = false;
  std::string taken_notice;  // the notice file's content at the notice already taken
  while (!stop) {
    // Sleep until the next report, waking at once on SIGTERM/SIGINT.
    if (WaitForSignal(signals, interval)) {
      // A revocation notice (the instance wrapper wrote the file, then signalled): like a
      // trainer that uses its notice window, go on until the instance goes. Otherwise (no
      // notice, or the signal of the instance's stop after the notice already taken) stop.
      const std::string file = Env("SPOTDNN_NOTICE_FILE");
      std::string notice;
      if (!file.empty()) {
        std::ifstream in(file);
        notice.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
      if (!notice.empty() && notice != taken_notice) {
        spdlog::info("revocation notice ({}): training on until the instance goes", file);
        taken_notice = notice;
      } else {
        stop = true;
      }
    }
    const absl::Time now = absl::Now();
    // Every iteration that has finished by now, at exactly the predicted pace.
    const int64_t done = static_cast<int64_t>(absl::FDivDuration(now - start, per_step));
    for (; step < done && (max_steps == 0 || step < max_steps); ++step) {
      pb::Sample s;
      s.set_job_id(job);
      s.set_worker_id(worker);
      s.set_instance_type(Env("SPOTDNN_INSTANCE_TYPE"));
      s.set_gpus(1);
      s.set_batch_size(batch);
      s.set_step(step + 1);
      s.set_wall_time_s(absl::ToDoubleSeconds(start + per_step * (step + 1) - absl::UnixEpoch()));
      s.set_iteration_time_s(iteration_s);
      if (!curve.empty()) {
        // Every worker steps at about this pace: the others' steps since the poll too.
        const double j = global_at_poll + static_cast<double>(step + 1 - own_at_poll) * workers;
        s.set_loss(std::max(1e-6, curve[0] / (j + curve[1]) + curve[2] + noise(rng)));
      }
      pending.push_back(std::move(s));
    }
    Report(*stub, pending);
    if (!curve.empty()) poll_global(step);
    if (max_steps > 0 && step >= max_steps) break;
  }
  Report(*stub, pending);
  return 0;
}
