// Throughput of the profiler.
//   BM_StoreSamples/10000:       samples stored per second, batches of 10,000 (a new job each)
//                                in one transaction, into a SQLite file in WAL mode
//                                (target >= 100,000/s)
//   BM_ReportSamplesLoopback:    samples per second streamed over 127.0.0.1 to spotdnn-profiler's
//                                ReportSamples and stored (target >= 100,000/s)
//   BM_ImportAndFitCmdare:       import every CM-DARE export into a fresh store, fit the speed
//                                curve of every series and the workload fit (target < 5 s)
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "benchmark/benchmark.h"
#include "profiler/fitting.h"
#include "profiler/importers.h"
#include "profiler/profile_store.h"
#include "services/common/server.h"
#include "services/profiler/profiler_service.h"

namespace spotdnn {
namespace {

namespace fs = std::filesystem;

// A fresh database file under the temp folder, removed with its WAL on destruction.
class TempDb {
 public:
  explicit TempDb(const std::string& tag)
      : path_((fs::temp_directory_path() /
               ("spotdnn-bench-" + tag + "-" + std::to_string(getpid()) + ".db"))
                  .string()) {
    Remove();
  }
  ~TempDb() { Remove(); }
  const std::string& path() const { return path_; }

 private:
  void Remove() {
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path_ + suffix);
  }
  std::string path_;
};

profiler::Sample MakeSample(std::int64_t step) {
  profiler::Sample s;
  s.job_id = "bench-job";
  s.worker_id = "worker-" + std::to_string(step % 8);
  s.instance_type = "p3.2xlarge";
  s.gpu_type = "V100";
  s.gpus = 1;
  s.batch_size = 128;
  s.step = step;
  s.wall_time_s = 1.7e9 + step * 0.25;
  s.iteration_time_s = 0.25;
  s.loss = 2.0 + 1.0 / (1 + step);
  s.bytes_sent = 11'540'000;
  s.bytes_received = 11'540'000;
  s.gpu_memory_gib = 7.5;
  s.cluster_workers = 8;
  s.communication_time_s = 0.08;
  return s;
}

void BM_StoreSamples(benchmark::State& state) {
  TempDb db("store");
  auto store = profiler::ProfileStore::Open(db.path());
  if (!store.ok()) {
    state.SkipWithError(std::string(store.status().message()).c_str());
    return;
  }
  std::vector<profiler::Sample> batch;
  for (int i = 0; i < state.range(0); ++i) batch.push_back(MakeSample(i));
  std::int64_t round = 0;
  for (auto _ : state) {
    // A new job each round: the store keeps one sample per (job, worker, step), so storing the
    // same batch again would store nothing.
    state.PauseTiming();
    ++round;
    for (profiler::Sample& s : batch) s.job_id = "bench-job-" + std::to_string(round);
    state.ResumeTiming();
    if (auto s = (*store)->AddSamples(batch, "bench"); !s.ok()) {
      state.SkipWithError(std::string(s.status().message()).c_str());
      return;
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_StoreSamples)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ReportSamplesLoopback(benchmark::State& state) {
  TempDb db("stream");
  auto store = profiler::ProfileStore::Open(db.path());
  if (!store.ok()) {
    state.SkipWithError(std::string(store.status().message()).c_str());
    return;
  }
  services::ProfilerServiceImpl service(std::shared_ptr<profiler::ProfileStore>(*std::move(store)));
  auto started = services::StartServer("127.0.0.1:0", {&service});
  if (!started.ok()) {
    state.SkipWithError(std::string(started.status().message()).c_str());
    return;
  }
  auto stub = services::pb::Profiler::NewStub(
      services::MakeChannel("127.0.0.1:" + std::to_string(started->port)));
  const int n = static_cast<int>(state.range(0));
  std::vector<services::pb::Sample> samples;
  for (int i = 0; i < n; ++i) samples.push_back(services::ToProto(MakeSample(i)));
  std::int64_t round = 0;
  for (auto _ : state) {
    grpc::ClientContext context;
    services::pb::ReportSamplesResponse response;
    auto writer = stub->ReportSamples(&context, &response);
    ++round;
    for (services::pb::Sample& s : samples) {
      s.set_job_id("stream-" + std::to_string(round));  // steps restart per job
      writer->Write(s, grpc::WriteOptions().set_buffer_hint());
    }
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    if (!status.ok() || response.accepted() != static_cast<std::uint64_t>(n)) {
      state.SkipWithError(status.ok() ? "samples rejected" : status.error_message().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * n);
  started->server->Shutdown();
}
BENCHMARK(BM_ReportSamplesLoopback)->Arg(100000)->Unit(benchmark::kMillisecond)->UseRealTime();

std::string CmdareDir() {
  const char* env = std::getenv("SPOTDNN_DATA_DIR");
  return std::string(env != nullptr && *env != '\0' ? env : SPOTDNN_DATA_DIR) + "/cmdare";
}

void BM_ImportAndFitCmdare(benchmark::State& state) {
  if (!fs::exists(CmdareDir())) {
    state.SkipWithError(("CM-DARE data not found at " + CmdareDir()).c_str());
    return;
  }
  std::int64_t samples = 0;
  for (auto _ : state) {
    TempDb db("cmdare");
    auto store = profiler::ProfileStore::Open(db.path());
    auto imported = profiler::ImportPath(CmdareDir(), {});
    if (!store.ok() || !imported.ok()) {
      state.SkipWithError("open or import failed");
      return;
    }
    if (auto s = (*store)->AddSamples(imported->samples, CmdareDir()); !s.ok()) {
      state.SkipWithError(std::string(s.status().message()).c_str());
      return;
    }
    auto stored = (*store)->LoadSamples({});
    for (const profiler::SpeedSeries& series : profiler::SpeedSeriesFromSamples(*stored)) {
      auto fit = profiler::FitSpeedCurve(series.runs);
      benchmark::DoNotOptimize(fit);
    }
    auto workload = profiler::FitWorkload(*stored, {});
    benchmark::DoNotOptimize(workload);
    samples = static_cast<std::int64_t>(stored->size());
  }
  state.counters["samples"] = static_cast<double>(samples);
}
BENCHMARK(BM_ImportAndFitCmdare)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace spotdnn

BENCHMARK_MAIN();
