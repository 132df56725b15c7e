// Fidelity of the cluster-speed models on real runs: the ICAC 2019 ResNet/CIFAR-10 runs on Google
// Cloud (shared/data/icac2019: K80, P100 and V100 workers, 1-8 of them, 1 or 2 parameter servers,
// several runs per cluster). Every file is imported as `spotdnn profile import` does (one job per
// run, runs that lost a worker mid-run left out), the runs of each cluster configuration are
// reduced to their median speed, and two models are fitted to all configurations at once:
//   shared-ps  one compute time per GPU type plus one shared parameter-server model (d, kappa)
//   paper      eqs. 6-9: |N| workers share P B_ps equally with probability a1 sqrt(|N|) + b1
// Then, for each model, every configuration is predicted by a fit that did not see it
//   - leave-one-cluster-out: one configuration held out at a time;
//   - leave-one-size-out: every configuration of one cluster size (all GPU types, both PS
//     counts) held out at once, "fit on all runs except one cluster size per GPU type";
// and the errors of the predicted time for the runs' steps against their measured duration are
// printed per cluster, with the MAPE. Not a test: it prints what it measures.
//
//   fidelity_bench [DATA_DIR]     (default: the build's SPOTDNN_DATA_DIR, or $SPOTDNN_DATA_DIR)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "profiler/cluster_fit.h"
#include "profiler/importers.h"

namespace {

using spotdnn::profiler::ClusterObservation;
using spotdnn::profiler::RunSet;

struct Source {
  std::string file;  // relative to icac2019/
  std::string gpu;
  int workers;
  int servers;
};

std::vector<Source> Sources() {
  std::vector<Source> out;
  const std::string e = "experiment_1ps_vs_2ps/";
  for (int n = 2; n <= 8; ++n) {
    out.push_back({absl::StrCat(e, "1ps", n, "v/train_data.csv"), "V100", n, 1});
    out.push_back({absl::StrCat(e, "1ps_k80/", n, "_data.csv"), "K80", n, 1});
    out.push_back({absl::StrCat(e, "2ps", n, "k/train_data.csv"), "K80", n, 2});
  }
  out.push_back({"k80_on_demand/k80-demand/train_data.csv", "K80", 1, 1});
  for (int n : {2, 4, 8}) {
    out.push_back({absl::StrCat("k80_on_demand/", n, "-demand/train_data.csv"), "K80", n, 1});
  }
  out.push_back({"k80_spot/2-spot/train_data.csv", "K80", 2, 1});
  out.push_back({"k80_spot/4-spot/4-spot-train_data.csv", "K80", 4, 1});
  out.push_back({"k80_spot/8-spot/train_data.csv", "K80", 8, 1});
  out.push_back({"p100_v100_spot/p100/train_data.csv", "P100", 1, 1});
  out.push_back({"p100_v100_spot/v100/train_data.csv", "V100", 1, 1});
  out.push_back({"p100_v100_spot/4p100/4p100_train_data.csv", "P100", 4, 1});
  out.push_back({"p100_v100_spot/4v100/4v100_train_data.csv", "V100", 4, 1});
  return out;
}

int Workers(const ClusterObservation& o) {
  int n = 0;
  for (const auto& [type, count] : o.composition) n += count;
  return n;
}

struct Row {
  ClusterObservation o;
  double shared = 0, paper = 0;  // predicted steps/s
};

double TimeError(const ClusterObservation& o, double predicted_speed) {
  // Predicted time for the runs' steps against their measured duration (or, without
  // checkpoints, the speed's ratio).
  if (!(predicted_speed > 0)) return NAN;
  if (o.steps > 0 && o.duration_s > 0) {
    return 100 * (o.steps / predicted_speed - o.duration_s) / o.duration_s;
  }
  return 100 * (o.steps_per_s / predicted_speed - 1);
}

void PrintTable(const std::string& title, const std::vector<Row>& rows) {
  std::printf("\n%s\n", title.c_str());
  std::printf("%-22s %4s %9s %9s %9s %8s %9s %8s\n", "cluster", "runs", "obs st/s", "obs time",
              "shared-ps", "error %", "paper", "error %");
  double shared_sum = 0, paper_sum = 0, shared_max = 0, paper_max = 0;
  int n = 0;
  for (const Row& r : rows) {
    const double es = TimeError(r.o, r.shared), ep = TimeError(r.o, r.paper);
    const double obs_time = r.o.duration_s > 0 ? r.o.duration_s : 0;
    std::printf("%-22s %4d %9.3f %9.0f %9.3f %+8.2f %9.3f %+8.2f\n", r.o.Describe().c_str(),
                r.o.runs, r.o.steps_per_s, obs_time, r.shared, es, r.paper, ep);
    if (std::isfinite(es) && std::isfinite(ep)) {
      shared_sum += std::fabs(es);
      paper_sum += std::fabs(ep);
      shared_max = std::max(shared_max, std::fabs(es));
      paper_max = std::max(paper_max, std::fabs(ep));
      ++n;
    }
  }
  std::printf(
      "MAPE of time over %d clusters: shared-ps %.2f%% (max %.2f%%), paper %.2f%% (max "
      "%.2f%%)\n",
      n, shared_sum / n, shared_max, paper_sum / n, paper_max);
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = argc > 1 ? argv[1] : "";
  if (data.empty()) {
    const char* env = std::getenv("SPOTDNN_DATA_DIR");
    data = env != nullptr && *env != '\0' ? env : SPOTDNN_DATA_DIR;
  }
  const std::string root = data + "/icac2019/";
  if (!std::filesystem::exists(root)) {
    std::fprintf(stderr, "fidelity_bench: %s not found (give the shared data folder)\n",
                 root.c_str());
    return 2;
  }
  constexpr double kPsBandwidth = 1000;  // MB/s of a 4-vCPU GCE server (2 Gbit/s per vCPU)
  std::vector<spotdnn::profiler::Sample> samples;
  int files = 0, left_out_notes = 0;
  std::uint64_t skipped = 0;
  for (const Source& s : Sources()) {
    spotdnn::profiler::ImportOptions options;
    options.job_id = s.file.substr(0, s.file.rfind('/'));
    options.gpu_type = s.gpu;
    options.instance_type = "gce-" + absl::AsciiStrToLower(s.gpu);
    options.cluster_workers = s.workers;
    options.parameter_servers = s.servers;
    options.batch_size = 128;
    auto imported = spotdnn::profiler::ImportPath(root + s.file, options);
    if (!imported.ok()) {
      std::fprintf(stderr, "fidelity_bench: %s\n", imported.status().ToString().c_str());
      return 1;
    }
    ++files;
    skipped += imported->skipped;
    left_out_notes += static_cast<int>(imported->notes.size());
    samples.insert(samples.end(), imported->samples.begin(), imported->samples.end());
  }
  const RunSet runs = spotdnn::profiler::RunsFromSamples(samples);
  const std::vector<ClusterObservation> all = spotdnn::profiler::GroupRuns(runs.runs);
  std::printf(
      "ICAC 2019 runs: %d files, %zu samples, %zu runs in %zu cluster configurations; "
      "%d runs left out (a worker revoked mid-run), %llu rows skipped\n",
      files, samples.size(), runs.runs.size(), all.size(), left_out_notes,
      static_cast<unsigned long long>(skipped));

  auto fit_both = [&](const std::vector<ClusterObservation>& train, std::vector<Row>& rows,
                      const std::vector<ClusterObservation>& test) -> bool {
    auto shared = spotdnn::profiler::FitSharedPs(train);
    auto paper = spotdnn::profiler::FitPaperForm(train, runs.types, kPsBandwidth);
    if (!shared.ok() || !paper.ok()) {
      std::fprintf(stderr, "fit failed: %s / %s\n", shared.status().ToString().c_str(),
                   paper.status().ToString().c_str());
      return false;
    }
    for (const ClusterObservation& o : test) {
      rows.push_back({o, shared->fit.StepsPerS(o.composition, o.parameter_servers),
                      paper->fit.StepsPerS(o.composition, o.parameter_servers)});
    }
    return true;
  };

  // Fitted on everything.
  auto shared = spotdnn::profiler::FitSharedPs(all);
  auto paper = spotdnn::profiler::FitPaperForm(all, runs.types, kPsBandwidth);
  if (!shared.ok() || !paper.ok()) {
    std::fprintf(stderr, "fit failed: %s / %s\n", shared.status().ToString().c_str(),
                 paper.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "\nshared-ps fitted on all %zu configurations: d = %.5f s (S_parm = %.3f MB at "
      "B_ps = %.0f MB/s), kappa = %.4f%s\n",
      all.size(), shared->fit.service_time_s, shared->fit.service_time_s * kPsBandwidth / 2,
      kPsBandwidth, shared->fit.queueing, shared->queueing_identified ? "" : " (not identified)");
  for (const auto& [type, z] : shared->fit.compute_time_s) {
    std::printf("  z[%s] = %.5f s\n", type.c_str(), z);
  }
  std::printf(
      "paper form fitted on all: S_parm = %.3f MB, B_req = %.1f MB/s, a1 = %.4f, "
      "b1 = %.4f\n",
      paper->fit.parameter_size_mb, paper->fit.required_bandwidth_mb_per_s,
      paper->fit.contention.a1, paper->fit.contention.b1);
  for (const auto& [type, t] : paper->fit.compute_time_s) {
    std::printf("  T_comp[%s] = %.5f s\n", type.c_str(), t);
  }
  std::vector<Row> in_sample;
  fit_both(all, in_sample, all);
  PrintTable("In sample (fitted on every configuration):", in_sample);

  std::vector<Row> loco;
  for (size_t i = 0; i < all.size(); ++i) {
    std::vector<ClusterObservation> train;
    for (size_t j = 0; j < all.size(); ++j) {
      if (j != i) train.push_back(all[j]);
    }
    bool type_seen = true;
    for (const auto& [type, n] : all[i].composition) {
      bool seen = false;
      for (const ClusterObservation& o : train) seen |= o.composition.count(type) > 0;
      type_seen &= seen;
    }
    if (!type_seen) continue;  // the only runs of a type: nothing to predict it from
    fit_both(train, loco, {all[i]});
  }
  PrintTable("Leave one cluster out (each configuration predicted by a fit without it):", loco);

  std::set<int> sizes;
  for (const ClusterObservation& o : all) sizes.insert(Workers(o));
  std::vector<Row> loso;
  for (int size : sizes) {
    std::vector<ClusterObservation> train, test;
    for (const ClusterObservation& o : all) (Workers(o) == size ? test : train).push_back(o);
    std::vector<ClusterObservation> predictable;
    for (const ClusterObservation& o : test) {
      bool ok = true;
      for (const auto& [type, n] : o.composition) {
        bool seen = false;
        for (const ClusterObservation& t : train) seen |= t.composition.count(type) > 0;
        ok &= seen;
      }
      if (ok) predictable.push_back(o);
    }
    fit_both(train, loso, predictable);
  }
  PrintTable("Leave one size out (every configuration of one cluster size held out at once):",
             loso);
  return 0;
}
