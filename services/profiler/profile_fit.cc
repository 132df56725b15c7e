// Fitting profiles over the service: FitProfile and ValidateProfile, the stored jobs they read,
// and a fit merged into its base profile.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/limits.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/method_handler.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "predictor/types.h"
#include "profiler/cluster_fit.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/common/request_check.h"
#include "services/common/request_size.h"
#include "services/common/server.h"
#include "services/profiler/profiler_service.h"
namespace spotdnn::services {
namespace {

void SetCompute(const predictor::ComputeProfile& in, pb::ComputeProfile* out) {
  out->set_instance_type(in.instance_type);
  out->set_gpu_type(in.gpu_type);
  out->set_batch_per_gpu(in.batch_per_gpu);
  if (in.compute_time_s) out->set_compute_time_s(*in.compute_time_s);
  if (in.measured_samples_per_s) out->set_measured_samples_per_s(*in.measured_samples_per_s);
}

// The names a `require` entry may use for each FitQuality parameter.
bool Matches(const std::string& wanted, const std::string& parameter) {
  if (wanted == parameter) return true;
  if (wanted == "contention") return parameter == "a1,b1";
  if (wanted == "memory") return parameter == "a2,b2";
  if (wanted == "loss") return parameter == "g1..g5";
  if (wanted == "T_comp" || wanted == "compute") return parameter.rfind("T_comp", 0) == 0;
  if (wanted == "ps") return parameter == "shared-ps";
  if (wanted == "kappa") return parameter == "queueing";
  return false;
}

// What a fit request takes as known: the base profile's S_parm and B_req, the bandwidths, and the
// variant asked for (else the base's, when there is a base).
profiler::KnownParameters KnownOf(const pb::WorkloadProfile& base, double ps_bandwidth,
                                  double pcie_bandwidth, bool has_variant, pb::ModelVariant variant,
                                  bool has_base) {
  profiler::KnownParameters known;
  known.parameter_size_mb = base.parameter_size_mb();
  known.required_bandwidth_mb_per_s = base.required_bandwidth_mb_per_s();
  known.ps_bandwidth_mb_per_s = ps_bandwidth;
  if (pcie_bandwidth > 0) known.pcie_bandwidth_mb_per_s = pcie_bandwidth;
  if (has_variant) {
    known.variant = ::spotdnn::services::ToDomain(variant);
  } else if (has_base) {
    known.variant = ::spotdnn::services::ToDomain(base.model_variant());
  }
  // The base's declared schedules (and forms) are the convergence fit's.
  for (const pb::ConvergenceModel& c : base.convergence()) {
    known.declared_convergence.push_back(::spotdnn::services::ToDomain(c));
  }
  return known;
}

absl::Status CheckBandwidths(double ps, double pcie) {
  for (const auto& [field, value] :
       {std::pair<const char*, double>{"parameter_server_bandwidth_mb_per_s", ps},
        {"pcie_bandwidth_mb_per_s", pcie}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " = ", value, ": must be a finite number >= 0"));
    }
  }
  return absl::OkStatus();
}

// A fit's quality per parameter, as the responses carry it.
void AddQuality(const std::vector<profiler::FitQuality>& quality,
                google::protobuf::RepeatedPtrField<pb::FitQuality>* out) {
  for (const profiler::FitQuality& q : quality) {
    pb::FitQuality* p = out->Add();
    p->set_parameter(q.parameter);
    p->set_rmse(q.rmse);
    p->set_r_squared(q.r_squared);
    p->set_mape(q.mape);
    p->set_identified(q.identified);
    p->set_note(q.note);
    p->set_points(q.points);
    p->set_worse_than_mean(q.worse_than_mean);
  }
}

}  // namespace

pb::WorkloadProfile MergeFit(const pb::WorkloadProfile& base, const profiler::WorkloadFit& fit) {
  pb::WorkloadProfile out = base;
  if (fit.compute_is_complete || ToDomain(base.model_variant()) != fit.variant) {
    out.clear_compute();
  }
  out.set_model_variant(ToProto(fit.variant));
  if (fit.shared_ps) out.mutable_shared_ps()->set_queueing(fit.shared_ps->queueing);
  if (fit.parameter_size_mb) out.set_parameter_size_mb(*fit.parameter_size_mb);
  if (fit.required_bandwidth_mb_per_s) {
    out.set_required_bandwidth_mb_per_s(*fit.required_bandwidth_mb_per_s);
  }
  for (const predictor::ComputeProfile& c : fit.compute) {
    pb::ComputeProfile* slot = nullptr;
    for (pb::ComputeProfile& existing : *out.mutable_compute()) {
      if (existing.instance_type() == c.instance_type && existing.gpu_type() == c.gpu_type) {
        slot = &existing;
      }
    }
    if (slot == nullptr) slot = out.add_compute();
    slot->Clear();
    SetCompute(c, slot);
  }
  if (fit.contention) {
    out.mutable_contention()->set_a1(fit.contention->a1);
    out.mutable_contention()->set_b1(fit.contention->b1);
  }
  if (fit.memory) {
    out.mutable_memory()->set_a2(fit.memory->a2);
    out.mutable_memory()->set_b2(fit.memory->b2);
  }
  if (fit.loss) {
    pb::LossModel* l = out.mutable_loss();
    l->set_g1(fit.loss->g1);
    l->set_g2(fit.loss->g2);
    l->set_g3(fit.loss->g3);
    l->set_g4(fit.loss->g4);
    l->set_g5(fit.loss->g5);
  }
  // A fitted convergence model replaces the base's of the same metric.
  for (const predictor::ConvergenceModel& c : fit.convergence) {
    pb::ConvergenceModel* slot = nullptr;
    for (pb::ConvergenceModel& existing : *out.mutable_convergence()) {
      if (existing.metric() == c.metric) slot = &existing;
    }
    if (slot == nullptr) slot = out.add_convergence();
    *slot = ::spotdnn::services::ToProto(c);
  }
  // A fitted all-reduce model replaces the base's of the same GPU type; synchronous samples make
  // the workload a synchronous one.
  if (fit.sync == predictor::SyncKind::kAllReduce) out.set_sync(pb::SYNC_KIND_ALLREDUCE);
  predictor::WorkloadProfile fitted;
  fitted.allreduce = fit.allreduce;
  const pb::WorkloadProfile fitted_proto = ::spotdnn::services::ToProto(fitted);
  for (const pb::AllReduceModel& m : fitted_proto.allreduce()) {
    pb::AllReduceModel* slot = nullptr;
    for (pb::AllReduceModel& existing : *out.mutable_allreduce()) {
      if (existing.gpu_type() == m.gpu_type()) slot = &existing;
    }
    if (slot == nullptr) slot = out.add_allreduce();
    *slot = m;
  }
  return out;
}

grpc::Status ProfilerServiceImpl::FitProfile(grpc::ServerContext* context,
                                             const pb::FitProfileRequest* request,
                                             pb::FitProfileResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  if (request->name().empty()) {
    return ToGrpc(absl::InvalidArgumentError("name is empty: name the profile to store"));
  }
  if (auto s = CheckBandwidths(request->parameter_server_bandwidth_mb_per_s(),
                               request->pcie_bandwidth_mb_per_s());
      !s.ok()) {
    return ToGrpc(s);
  }
  if (request->has_base()) {
    // The base's values go into the stored profile as they are: they pass the store's check
    // before any work, named as the request names them ("base.compute[0].batch_per_gpu").
    const predictor::WorkloadProfile base = ToDomain(request->base());
    if (absl::Status s = base.Validate(predictor::WorkloadProfile::Completeness::kPartial);
        !s.ok()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "base.",
          absl::StripPrefix(s.message(), absl::StrCat("workload \"", base.name, "\": ")))));
    }
  }
  // Bounded before it runs (LoadJobs), and stopped at the call's deadline (or the server's limit)
  // while it runs.
  auto samples = LoadJobs(request->job_ids(), "job_ids");
  if (!samples.ok()) return ToGrpc(samples.status());
  std::set<std::string> seen;
  for (const profiler::Sample& s : *samples) seen.insert(s.job_id);
  const profiler::KnownParameters known =
      KnownOf(request->base(), request->parameter_server_bandwidth_mb_per_s(),
              request->pcie_bandwidth_mb_per_s(), request->has_model_variant(),
              request->model_variant(), request->has_base());
  auto fit = profiler::FitWorkload(
      *samples, known,
      CallStopCheck(context, options_.max_fit_time, "the fit", "the server's fit time limit"));
  if (!fit.ok()) return ToGrpc(fit.status());
  for (const std::string& wanted : request->require()) {
    bool found = false;
    for (const profiler::FitQuality& q : fit->quality) {
      if (!Matches(wanted, q.parameter)) continue;
      found = true;
      if (!q.identified) {
        return ToGrpc(absl::FailedPreconditionError(
            absl::StrCat("required parameter ", wanted, " not identified: ", q.note)));
      }
    }
    if (!found) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "require = \"", wanted,
          "\": not a parameter of this fit; expected S_parm, B_req, T_comp, a1,b1, a2,b2, "
          "g1..g5, or for shared-ps: ps, kappa")));
    }
  }
  const bool identified_any = fit->parameter_size_mb || fit->required_bandwidth_mb_per_s ||
                              !fit->compute.empty() || fit->contention || fit->memory ||
                              fit->loss || fit->shared_ps || !fit->convergence.empty() ||
                              !fit->allreduce.empty();
  if (!identified_any) {
    // Storing the base (or an empty profile) as a new version would look like a fit.
    std::vector<std::string> why;
    for (const profiler::FitQuality& q : fit->quality) {
      if (!q.note.empty()) why.push_back(absl::StrCat(q.parameter, ": ", q.note));
    }
    return ToGrpc(absl::FailedPreconditionError(absl::StrCat(
        "name = \"", request->name(), "\": the ", samples->size(), " samples of ", seen.size(),
        seen.size() == 1 ? " job" : " jobs",
        " identify no parameter, so no version is stored (samples need iteration times, "
        "bytes sent, losses or GPU memory; runs of several cluster sizes for a1, b1)",
        why.empty() ? "" : absl::StrCat(": ", absl::StrJoin(why, "; ")))));
  }
  pb::WorkloadProfile profile = MergeFit(request->base(), *fit);
  if (auto s = CheckRequest(profile, "profile"); !s.ok()) {
    return ToGrpc(absl::FailedPreconditionError(
        absl::StrCat("the fit gave a value that cannot be stored: ", s.message())));
  }
  profile.set_name(request->name());
  // The base's description was of the base: it no longer holds for the fitted numbers.
  profile.set_description(
      request->base().name().empty()
          ? std::string("fitted from samples")
          : absl::StrCat("fitted from samples; what the samples do not determine is taken from ",
                         request->base().name()));
  profile.set_source(absl::StrCat("fitted by spotdnn-profiler from ", samples->size(),
                                  " samples of ", seen.size(),
                                  seen.size() == 1 ? " job" : " jobs"));
  auto stored = Store(std::move(profile));
  if (!stored.ok()) return ToGrpc(stored.status());
  *response->mutable_profile() = *std::move(stored);
  AddQuality(fit->quality, response->mutable_quality());
  for (const profiler::ParameterSpread& p : fit->spread) {
    pb::ParameterSpread* out = response->add_spread();
    out->set_parameter(p.parameter);
    out->set_value(p.value);
    out->set_sd(p.sd);
  }
  for (const profiler::FitResidual& r : fit->worst_residuals) {
    pb::FitResidual* out = response->add_worst_residuals();
    out->set_parameter(r.parameter);
    out->set_configuration(r.configuration);
    out->set_local_batch(r.local_batch);
    out->set_measured_s(r.measured_s);
    out->set_fitted_s(r.fitted_s);
    out->set_error_pct(r.error_pct);
  }
  return grpc::Status::OK;
}

absl::StatusOr<std::vector<profiler::Sample>> ProfilerServiceImpl::LoadJobs(
    const google::protobuf::RepeatedPtrField<std::string>& jobs, absl::string_view field) {
  const std::vector<std::string> ids(jobs.begin(), jobs.end());
  // Counted before they are read: a fit's memory and time grow with its samples.
  auto count = store_->CountSamples(ids);
  if (!count.ok()) return count.status();
  if (*count > kMaxFitSamples) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s hold %d samples, above the %d one fit may use; fit from fewer jobs", field,
        ids.empty() ? "all jobs" : "the jobs named", *count, kMaxFitSamples));
  }
  auto samples = store_->LoadSamples(ids);
  if (!samples.ok()) return samples.status();
  std::set<std::string> seen;
  for (const profiler::Sample& s : *samples) seen.insert(s.job_id);
  for (size_t i = 0; i < ids.size(); ++i) {
    // The job itself, or one of its runs ("J/run-3"): the first id at or after "J/" says.
    const std::string prefix = ids[i] + "/";
    auto it = seen.lower_bound(prefix);
    const bool found =
        seen.count(ids[i]) > 0 || (it != seen.end() && it->compare(0, prefix.size(), prefix) == 0);
    if (!found) {
      return absl::NotFoundError(
          absl::StrCat(field, "[", i, "] = \"", ids[i], "\": no samples stored"));
    }
  }
  return samples;
}

grpc::Status ProfilerServiceImpl::ValidateProfile(grpc::ServerContext* context,
                                                  const pb::ValidateProfileRequest* request,
                                                  pb::ValidateProfileResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  if (request->fit_job_ids().empty() || request->check_job_ids().empty()) {
    return ToGrpc(absl::InvalidArgumentError(
        "fit_job_ids and check_job_ids: name the jobs to fit on and the jobs to predict"));
  }
  if (auto s = CheckBandwidths(request->parameter_server_bandwidth_mb_per_s(), 0); !s.ok()) {
    return ToGrpc(s);
  }
  if (!(std::isfinite(request->iterations()) && request->iterations() >= 0 &&
        request->iterations() <= predictor::kMaxTargetIterations)) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("iterations = ", request->iterations(), ": must be a finite number in [0, ",
                     predictor::kMaxTargetIterations, "] (0 = the runs')")));
  }
  auto fit = LoadJobs(request->fit_job_ids(), "fit_job_ids");
  if (!fit.ok()) return ToGrpc(fit.status());
  auto check = LoadJobs(request->check_job_ids(), "check_job_ids");
  if (!check.ok()) return ToGrpc(check.status());
  const profiler::KnownParameters known =
      KnownOf(request->base(), request->parameter_server_bandwidth_mb_per_s(), 0,
              request->has_model_variant(), request->model_variant(), request->has_base());
  auto validation =
      profiler::ValidateFit(*fit, *check, known, request->iterations(),
                            CallStopCheck(context, options_.max_fit_time, "the validation",
                                          "the server's fit time limit"));
  if (!validation.ok()) return ToGrpc(validation.status());
  *response->mutable_profile() = ToProto(validation->profile);
  AddQuality(validation->quality, response->mutable_quality());
  for (const profiler::ClusterCheck& c : validation->clusters) {
    pb::ClusterValidation* out = response->add_clusters();
    for (const auto& [type, n] : c.observed.composition) {
      pb::InstanceCount* i = out->mutable_cluster()->add_instances();
      i->set_instance_type(type);
      i->set_count(n);
    }
    out->mutable_cluster()->set_parameter_servers(c.observed.parameter_servers);
    out->set_runs(c.observed.runs);
    out->set_observed_steps_per_s(c.observed.steps_per_s);
    out->set_predicted_steps_per_s(c.predicted_steps_per_s);
    out->set_iterations(c.iterations);
    out->set_observed_time_s(c.observed_time_s);
    out->set_predicted_time_s(c.predicted_time_s);
    out->set_error_pct(c.error_pct);
  }
  response->set_mape(validation->mape);
  response->set_max_error_pct(validation->max_error_pct);
  return grpc::Status::OK;
}

}  // namespace spotdnn::services
