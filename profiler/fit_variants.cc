// FitWorkload: the paper's per-parameter fits, then the model variant the runs support (the
// shared parameter server's, or the paper's fitted to the runs' speeds when per-iteration times
// are missing), and ProfileOf.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "profiler/allreduce_fit.h"
#include "profiler/batch_scaling.h"
#include "profiler/cluster_fit.h"
#include "profiler/convergence_fit.h"
#include "profiler/fit_stop.h"
#include "profiler/fitting.h"

namespace spotdnn::profiler {
namespace {

// The paper's per-parameter fits (eqs. 3, 6-10) from per-iteration samples. Polls the fit's stop
// check (fit_stop.h) between the fits.
absl::StatusOr<WorkloadFit> FitPaperWorkload(absl::Span<const Sample> samples,
                                             const KnownParameters& known) {
  if (samples.empty()) {
    return absl::FailedPreconditionError("no samples to fit: report or import some first");
  }
  WorkloadFit fit;
  // Records a parameter that the data could not determine (FAILED_PRECONDITION); other errors
  // are the fit's own failure and travel up.
  auto unidentified = [&](absl::string_view parameter, const absl::Status& status) {
    if (auto s = FitStopStatus(); !s.ok()) return s;  // a solve was stopped, not unable
    FitQuality q;
    q.parameter = std::string(parameter);
    q.note = std::string(status.message());
    fit.quality.push_back(std::move(q));
    return absl::IsFailedPrecondition(status) ? absl::OkStatus() : status;
  };
  KnownParameters k = known;
  if (k.parameter_size_mb > 0) {
    FitQuality q{.parameter = "S_parm", .identified = true, .note = "given by the base profile"};
    fit.quality.push_back(q);
  } else {
    FitQuality q;
    auto size = FitParameterSize(samples, &q);
    if (size.ok()) {
      fit.parameter_size_mb = k.parameter_size_mb = *size;
      fit.quality.push_back(q);
    } else if (auto s = unidentified("S_parm", size.status()); !s.ok()) {
      return s;
    }
  }
  if (k.required_bandwidth_mb_per_s > 0) {
    fit.quality.push_back(
        FitQuality{.parameter = "B_req", .identified = true, .note = "given by the base profile"});
  } else {
    FitQuality q;
    auto b = FitRequiredBandwidth(samples, k.parameter_size_mb, &q);
    if (b.ok()) {
      fit.required_bandwidth_mb_per_s = k.required_bandwidth_mb_per_s = *b;
      fit.quality.push_back(q);
    } else if (auto s = unidentified("B_req", b.status()); !s.ok()) {
      return s;
    }
  }
  {
    std::vector<FitQuality> q;
    auto compute = FitCompute(samples, &q);
    if (compute.ok()) {
      fit.compute = *std::move(compute);
      fit.quality.insert(fit.quality.end(), q.begin(), q.end());
    } else if (auto s = unidentified("T_comp", compute.status()); !s.ok()) {
      return s;
    }
  }
  if (auto s = PollFitStop(); !s.ok()) return s;
  {
    auto contention = FitContention(samples, k);
    if (contention.ok()) {
      fit.contention = contention->contention;
      fit.quality.push_back(contention->quality);
    } else if (auto s = unidentified("a1,b1", contention.status()); !s.ok()) {
      return s;
    }
  }
  if (auto s = PollFitStop(); !s.ok()) return s;
  {
    FitQuality q;
    auto memory = FitMemory(samples, &q);
    if (memory.ok()) {
      fit.memory = *memory;
      fit.quality.push_back(q);
    } else if (auto s = unidentified("a2,b2", memory.status()); !s.ok()) {
      return s;
    }
  }
  if (auto s = PollFitStop(); !s.ok()) return s;
  {
    FitQuality q;
    auto loss = FitLoss(samples, &q);
    if (loss.ok()) {
      fit.loss = *loss;
      fit.quality.push_back(q);
    } else if (auto s = unidentified("g1..g5", loss.status()); !s.ok()) {
      return s;
    }
  }
  if (auto s = PollFitStop(); !s.ok()) return s;
  return fit;
}

// A row for the runs the cluster fits used.
FitQuality RunsRow(const RunSet& runs, size_t configurations) {
  FitQuality q;
  q.parameter = "runs";
  q.identified = !runs.runs.empty();
  q.points = static_cast<int>(runs.runs.size());
  q.note = absl::StrCat(runs.runs.size(), runs.runs.size() == 1 ? " run in " : " runs in ",
                        configurations,
                        configurations == 1 ? " cluster configuration" : " cluster configurations");
  if (!runs.left_out.empty()) absl::StrAppend(&q.note, "; ", runs.LeftOutSummary());
  return q;
}

// Compute entries of the fitted types: by instance type when the runs name one (and then by its
// GPU type too, when no other fitted type has that GPU), else by GPU type.
std::vector<predictor::ComputeProfile> ComputeEntries(
    const std::map<std::string, double>& times, const std::map<std::string, TypeInfo>& types) {
  std::map<std::string, int> gpu_count;
  for (const auto& [key, t] : times) {
    auto it = types.find(key);
    if (it != types.end()) ++gpu_count[it->second.gpu_type];
  }
  std::vector<predictor::ComputeProfile> out;
  for (const auto& [key, t] : times) {
    auto it = types.find(key);
    const TypeInfo info = it == types.end() ? TypeInfo{.gpu_type = key} : it->second;
    predictor::ComputeProfile c;
    c.batch_per_gpu = info.batch_per_gpu;
    c.compute_time_s = t;
    if (!info.instance_type.empty()) {
      c.instance_type = info.instance_type;
      out.push_back(c);
      if (!info.gpu_type.empty() && gpu_count[info.gpu_type] == 1 && !times.count(info.gpu_type)) {
        c.instance_type.clear();
        c.gpu_type = info.gpu_type;
        out.push_back(c);
      }
    } else {
      c.gpu_type = key;
      out.push_back(c);
    }
  }
  return out;
}

// Keeps the rows of `from` that are not about contention, compute or S_parm/B_req.
void KeepOtherRows(const WorkloadFit& from, WorkloadFit& to) {
  for (const FitQuality& q : from.quality) {
    if (q.parameter == "a2,b2" || q.parameter == "g1..g5") to.quality.push_back(q);
  }
  to.memory = from.memory;
  to.loss = from.loss;
}

absl::StatusOr<WorkloadFit> FitSharedPsWorkload(const RunSet& runs,
                                                absl::Span<const ClusterObservation> observations,
                                                const WorkloadFit& paper,
                                                const KnownParameters& known) {
  if (!(known.ps_bandwidth_mb_per_s > 0)) {
    return absl::FailedPreconditionError(
        "the shared-ps model needs B_ps, the parameter server's bandwidth the runs trained "
        "against (--ps-bandwidth), to express the servers' time per iteration as S_parm");
  }
  SharedPsFitOptions options;
  if (known.parameter_size_mb > 0) {
    options.service_time_s = 2 * known.parameter_size_mb / known.ps_bandwidth_mb_per_s;
  }
  auto result = FitSharedPs(observations, options);
  if (!result.ok()) return result.status();
  WorkloadFit fit;
  fit.variant = predictor::ModelVariant::kSharedPs;
  fit.shared_ps = predictor::SharedPsModel{result->fit.queueing};
  const double size = result->fit.service_time_s * known.ps_bandwidth_mb_per_s / 2;
  if (!(known.parameter_size_mb > 0)) fit.parameter_size_mb = size;
  if (!(known.required_bandwidth_mb_per_s > 0)) {
    fit.required_bandwidth_mb_per_s = known.ps_bandwidth_mb_per_s;
  }
  fit.compute = ComputeEntries(result->fit.compute_time_s, runs.types);
  fit.compute_is_complete = true;
  fit.quality.push_back(RunsRow(runs, observations.size()));
  for (FitQuality q : result->quality) {
    if (q.parameter == "S_parm") {
      absl::StrAppend(&q.note, absl::StrFormat("; S_parm = d B_ps / 2 = %.4g MB at B_ps = %g MB/s",
                                               size, known.ps_bandwidth_mb_per_s));
    }
    fit.quality.push_back(std::move(q));
  }
  fit.quality.push_back(FitQuality{
      .parameter = "B_req",
      .identified = true,
      .note = "set to B_ps: the shared-ps variant does not use it (a lone worker moves 2 S_parm "
              "through one server in d)"});
  KeepOtherRows(paper, fit);
  return fit;
}

absl::StatusOr<WorkloadFit> FitPaperFromRuns(const RunSet& runs,
                                             absl::Span<const ClusterObservation> observations,
                                             const WorkloadFit& paper,
                                             const KnownParameters& known) {
  auto result = FitPaperForm(observations, runs.types, known.ps_bandwidth_mb_per_s,
                             known.pcie_bandwidth_mb_per_s);
  if (!result.ok()) return result.status();
  WorkloadFit fit;
  fit.variant = *known.variant;
  fit.parameter_size_mb = result->fit.parameter_size_mb;
  fit.required_bandwidth_mb_per_s = result->fit.required_bandwidth_mb_per_s;
  fit.contention = result->fit.contention;
  fit.compute = ComputeEntries(result->fit.compute_time_s, runs.types);
  fit.compute_is_complete = true;
  fit.quality.push_back(RunsRow(runs, observations.size()));
  fit.quality.insert(fit.quality.end(), result->quality.begin(), result->quality.end());
  KeepOtherRows(paper, fit);
  return fit;
}

// FitWorkload without its stop scope.
absl::StatusOr<WorkloadFit> FitVariants(absl::Span<const Sample> samples,
                                        const KnownParameters& known) {
  auto paper = FitPaperWorkload(samples, known);
  if (!paper.ok()) return paper.status();
  if (auto s = PollFitStop(); !s.ok()) return s;
  const RunSet runs = RunsFromSamples(samples);
  const std::vector<ClusterObservation> observations = GroupRuns(runs.runs);
  if (known.variant.has_value() && *known.variant != predictor::ModelVariant::kSharedPs) {
    paper->variant = *known.variant;
    if (!paper->contention && *known.variant == predictor::ModelVariant::kPaper &&
        !observations.empty()) {
      // No per-iteration times to fit eqs. 8-9 from: fit them to the runs' speeds instead.
      auto from_runs = FitPaperFromRuns(runs, observations, *paper, known);
      if (from_runs.ok()) return from_runs;
      if (!absl::IsFailedPrecondition(from_runs.status())) return from_runs.status();
    }
    return paper;
  }
  auto shared = observations.empty()
                    ? absl::StatusOr<WorkloadFit>(absl::FailedPreconditionError(
                          "the shared-ps model needs runs with a speed and a type; got none"))
                    : FitSharedPsWorkload(runs, observations, *paper, known);
  if (known.variant.has_value()) return shared;  // shared-ps asked for
  if (shared.ok() && !paper->contention) return shared;
  if (!shared.ok() && !absl::IsFailedPrecondition(shared.status())) return shared.status();
  if (!shared.ok() && !observations.empty()) {
    // Why the runs did not give the shared-ps variant (the paper's was fitted instead).
    FitQuality q;
    q.parameter = "shared-ps";
    q.note = std::string(shared.status().message());
    paper->quality.push_back(std::move(q));
  }
  return paper;
}

}  // namespace

namespace {

// The all-reduce model of every GPU type of `synchronous`, and the parameter-server fit of
// `others` when they fit one (a workload profiled both ways).
absl::StatusOr<WorkloadFit> FitSynchronous(const std::vector<Sample>& synchronous,
                                           const std::vector<Sample>& others,
                                           const KnownParameters& known) {
  WorkloadFit fit;
  if (!others.empty()) {
    auto ps = FitVariants(others, known);
    if (auto s = PollFitStop(); !s.ok()) return s;
    if (ps.ok()) fit = *std::move(ps);
  }
  std::set<std::string> gpu_types;
  for (const Sample& s : synchronous) gpu_types.insert(s.gpu_type);
  for (const std::string& gpu_type : gpu_types) {
    if (gpu_type.empty()) {
      FitQuality q;
      q.parameter = "allreduce";
      q.note = "synchronous samples without a gpu_type are left out (import with --gpu-type)";
      fit.quality.push_back(std::move(q));
      continue;
    }
    auto one = FitAllReduce(gpu_type, AllReduceRunsOf(synchronous, gpu_type));
    if (auto s = PollFitStop(); !s.ok()) return s;
    if (!one.ok()) {
      FitQuality q;
      q.parameter = absl::StrCat("allreduce[", gpu_type, "]");
      q.note = std::string(one.status().message());
      fit.quality.push_back(std::move(q));
      continue;
    }
    fit.allreduce.push_back(one->model);
    for (FitQuality& q : one->quality) fit.quality.push_back(std::move(q));
    fit.spread.insert(fit.spread.end(), one->spread.begin(), one->spread.end());
    fit.worst_residuals.insert(fit.worst_residuals.end(), one->worst.begin(), one->worst.end());
  }
  if (fit.allreduce.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the synchronous samples fit no all-reduce model: ",
                     fit.quality.empty() ? "no usable run" : fit.quality.back().note));
  }
  fit.sync = predictor::SyncKind::kAllReduce;
  // The convergence of its runs, each one worker at its global batch, with the critical-batch
  // law where they trained at several.
  std::vector<Sample> all = synchronous;
  all.insert(all.end(), others.begin(), others.end());
  fit.convergence = FitSyncConvergences(all, known.declared_convergence, &fit.quality);
  if (auto s = PollFitStop(); !s.ok()) return s;
  NoteWorseThanMean(fit.quality);
  return fit;
}

}  // namespace

absl::StatusOr<WorkloadFit> FitWorkload(absl::Span<const Sample> samples,
                                        const KnownParameters& known,
                                        const std::function<absl::Status()>& stop) {
  FitStopScope scope(stop);  // every solve of this fit polls `stop`
  std::vector<Sample> synchronous, others;
  for (const Sample& s : samples) (s.placement.empty() ? others : synchronous).push_back(s);
  if (!synchronous.empty()) return FitSynchronous(synchronous, others, known);
  auto fit = FitVariants(samples, known);
  // A fit whose solves were stopped fails with the stop's status, whatever the solves made of it.
  if (auto s = PollFitStop(); !s.ok()) return s;
  if (fit.ok()) {
    fit->convergence = FitConvergences(samples, known.declared_convergence, &fit->quality);
    if (auto s = PollFitStop(); !s.ok()) return s;
    NoteWorseThanMean(fit->quality);
  }
  return fit;
}

predictor::WorkloadProfile ProfileOf(const WorkloadFit& fit, const KnownParameters& known,
                                     std::string name) {
  predictor::WorkloadProfile p;
  p.name = std::move(name);
  p.parameter_size_mb = fit.parameter_size_mb.value_or(known.parameter_size_mb);
  p.required_bandwidth_mb_per_s =
      fit.required_bandwidth_mb_per_s.value_or(known.required_bandwidth_mb_per_s);
  p.compute = fit.compute;
  p.contention = fit.contention;
  p.memory = fit.memory;
  p.loss = fit.loss;
  p.variant = fit.variant;
  p.shared_ps = fit.shared_ps;
  p.convergence = fit.convergence;
  p.sync = fit.sync;
  p.allreduce = fit.allreduce;
  return p;
}

}  // namespace spotdnn::profiler
