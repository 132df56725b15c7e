// Throughput of the profiler.
//   BM_StoreSamples/10000:       samples stored per second, batches of 10,000 (a new job each)
//                                in one transaction, into a SQLite file in WAL mode
//                                (target >= 100,000/s)
//   BM_ReportSamplesLoopback:    samples per second streamed over 127.0.0.1 to spotdnn-profiler's
//                                ReportSamples and stored (target >= 100,000/s)
//   BM_ImportAndFitCmdare:       import every CM-DARE export into a fresh store, fit the speed
//                                curve of every series and the workload fit (target < 5 s)
//
// Usage: profiler_bench [--store sqlite|postgres|postgres://…] [Google Benchmark flags]
//   --store sqlite (default): a fresh SQLite file under the temp folder for each benchmark.
//   --store postgres: a throwaway PostgreSQL server (tests/testing/postgres_server.h: the Debian
//     binaries in a temporary folder on a free 127.0.0.1 port), a fresh database per benchmark.
//   --store postgres://USER@HOST:PORT/DB: that database (the profiler's schema in it is reused;
//     each run's job ids carry this process's id so runs do not collide).
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "benchmark/benchmark.h"
#include "profiler/fitting.h"
#include "profiler/importers.h"
#include "profiler/profile_store.h"
#include "profiler/speed_curve.h"
#include "services/common/server.h"
#include "services/profiler/profiler_service.h"
#ifdef SPOTDNN_BENCH_POSTGRES
#include "tests/testing/postgres_server.h"
#endif

namespace spotdnn {
namespace {

namespace fs = std::filesystem;

// The --store flag's value: "sqlite", "postgres" or a postgres:// URI.
std::string& StoreFlag() {
  static std::string flag = "sqlite";
  return flag;
}

// A fresh store for one benchmark, as --store says: a SQLite file under the temp folder (removed
// with its WAL on destruction), a new database on the throwaway server, or the given URI.
class BenchStore {
 public:
  explicit BenchStore(const std::string& tag) {
    const std::string& flag = StoreFlag();
    if (flag == "sqlite") {
      path_ = (fs::temp_directory_path() /
               ("spotdnn-bench-" + tag + "-" + std::to_string(getpid()) + ".db"))
                  .string();
      Remove();
      spec_ = path_;
    } else if (flag == "postgres") {
#ifdef SPOTDNN_BENCH_POSTGRES
      // A new database on the tests' throwaway server (one for the whole run).
      absl::StatusOr<std::string> uri =
          testing_util::FreshStoreSpec(testing_util::StoreBackend::kPostgres, "");
      if (uri.ok()) {
        spec_ = *uri;
      } else {
        error_ = std::string(uri.status().message());
      }
#else
      error_ =
          "--store = \"postgres\": this build has no throwaway server (tests are off); give "
          "a postgres:// URI";
#endif
    } else {
      spec_ = flag;
    }
  }
  ~BenchStore() { Remove(); }
  // The store spec, or empty with error() saying why there is none.
  const std::string& spec() const { return spec_; }
  const std::string& error() const { return error_; }

 private:
  void Remove() {
    if (path_.empty()) return;
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path_ + suffix);
  }
  std::string path_;
  std::string spec_;
  std::string error_;
};

// Job ids unique to this process: a shared --store URI keeps the rows of earlier runs.
std::string JobId(const std::string& prefix, std::int64_t round) {
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(round);
}

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
  BenchStore db("store");
  if (db.spec().empty()) {
    state.SkipWithError(db.error().c_str());
    return;
  }
  auto store = profiler::ProfileStore::Open(db.spec());
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
    for (profiler::Sample& s : batch) s.job_id = JobId("bench-job", round);
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
  BenchStore db("stream");
  if (db.spec().empty()) {
    state.SkipWithError(db.error().c_str());
    return;
  }
  auto store = profiler::ProfileStore::Open(db.spec());
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
      s.set_job_id(JobId("stream", round));  // steps restart per job
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
    BenchStore db("cmdare");
    if (db.spec().empty()) {
      state.SkipWithError(db.error().c_str());
      return;
    }
    auto store = profiler::ProfileStore::Open(db.spec());
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

// Takes --store (see the header) out of the arguments; the rest are Google Benchmark's.
int main(int argc, char** argv) {
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strncmp(arg, "--store=", 8) == 0) {
      spotdnn::StoreFlag() = arg + 8;
    } else if (std::strcmp(arg, "--store") == 0 && i + 1 < argc) {
      spotdnn::StoreFlag() = argv[++i];
    } else {
      rest.push_back(argv[i]);
    }
  }
  const std::string& store = spotdnn::StoreFlag();
  if (store != "sqlite" && store != "postgres" && store.rfind("postgres://", 0) != 0 &&
      store.rfind("postgresql://", 0) != 0) {
    std::cerr << "--store = \"" << store << "\": expected sqlite, postgres or a postgres:// URI\n";
    return 2;
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
