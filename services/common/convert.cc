#include "services/common/convert.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/limits.h"

namespace spotdnn::services {

predictor::InstanceCatalog ToDomain(const pb::InstanceCatalog& in) {
  predictor::InstanceCatalog out;
  out.name = in.name();
  out.provider = in.provider();
  out.region = in.region();
  for (const pb::InstanceType& t : in.instance_types()) {
    out.types.push_back({.name = t.name(),
                         .gpu_type = t.gpu_type(),
                         .gpus = t.gpus(),
                         .gpu_memory_gib = t.gpu_memory_gib(),
                         .spot_price_per_hour = t.spot_price_per_hour(),
                         .on_demand_price_per_hour = t.on_demand_price_per_hour(),
                         .quota = t.quota()});
  }
  out.parameter_server = {
      .instance_type = in.parameter_server().instance_type(),
      .bandwidth_mb_per_s = in.parameter_server().bandwidth_mb_per_s(),
      .spot_price_per_hour = in.parameter_server().spot_price_per_hour(),
      .on_demand_price_per_hour = in.parameter_server().on_demand_price_per_hour()};
  out.pcie_bandwidth_mb_per_s = in.pcie_bandwidth_mb_per_s();
  return out;
}

predictor::WorkloadProfile ToDomain(const pb::WorkloadProfile& in) {
  predictor::WorkloadProfile out;
  out.name = in.name();
  out.parameter_size_mb = in.parameter_size_mb();
  out.required_bandwidth_mb_per_s = in.required_bandwidth_mb_per_s();
  for (const pb::ComputeProfile& c : in.compute()) {
    predictor::ComputeProfile d;
    d.instance_type = c.instance_type();
    d.gpu_type = c.gpu_type();
    d.batch_per_gpu = c.batch_per_gpu();
    if (c.has_compute_time_s()) d.compute_time_s = c.compute_time_s();
    if (c.has_measured_samples_per_s()) d.measured_samples_per_s = c.measured_samples_per_s();
    out.compute.push_back(std::move(d));
  }
  if (in.has_contention()) out.contention = {in.contention().a1(), in.contention().b1()};
  if (in.has_memory()) out.memory = {in.memory().a2(), in.memory().b2()};
  if (in.has_loss()) {
    const pb::LossModel& l = in.loss();
    out.loss = predictor::LossModel{l.g1(), l.g2(), l.g3(), l.g4(), l.g5()};
  }
  out.variant = ToDomain(in.model_variant());
  if (in.has_shared_ps()) out.shared_ps = predictor::SharedPsModel{in.shared_ps().queueing()};
  for (const pb::ConvergenceModel& c : in.convergence()) out.convergence.push_back(ToDomain(c));
  out.sync = in.sync() == pb::SYNC_KIND_ALLREDUCE ? predictor::SyncKind::kAllReduce
                                                  : predictor::SyncKind::kParameterServer;
  out.global_batch = in.global_batch() == pb::GLOBAL_BATCH_SCALE ? predictor::GlobalBatch::kScale
                                                                 : predictor::GlobalBatch::kFixed;
  for (const pb::AllReduceModel& a : in.allreduce()) {
    predictor::AllReduceModel m;
    m.gpu_type = a.gpu_type();
    m.compute_fixed_s = a.compute_fixed_s();
    m.compute_per_sample_s = a.compute_per_sample_s();
    m.compute_contention = a.compute_contention();
    m.intra_fixed_s = a.intra_fixed_s();
    m.intra_ring_s = a.intra_ring_s();
    m.cross_instance = a.cross_instance();
    m.cross_fixed_s = a.cross_fixed_s();
    m.cross_straggler_s = a.cross_straggler_s();
    m.cross_per_gpu_s = a.cross_per_gpu_s();
    m.cross_pair_s = a.cross_pair_s();
    // 0 is an unset gamma (proto3): no overlap, as 1.
    m.overlap_gamma = a.overlap_gamma() == 0 ? 1 : a.overlap_gamma();
    m.max_gpus_per_instance = a.max_gpus_per_instance();
    out.allreduce.push_back(std::move(m));
  }
  out.global_batch_size = in.global_batch_size();
  out.local_batch_size = in.local_batch_size();
  if (in.has_restart_s()) out.restart_s = in.restart_s();
  if (in.has_checkpoint_every_s()) out.checkpoint_every_s = in.checkpoint_every_s();
  return out;
}

pb::WorkloadProfile ToProto(const predictor::WorkloadProfile& in) {
  pb::WorkloadProfile out;
  out.set_name(in.name);
  out.set_parameter_size_mb(in.parameter_size_mb);
  out.set_required_bandwidth_mb_per_s(in.required_bandwidth_mb_per_s);
  for (const predictor::ComputeProfile& c : in.compute) {
    pb::ComputeProfile* o = out.add_compute();
    o->set_instance_type(c.instance_type);
    o->set_gpu_type(c.gpu_type);
    o->set_batch_per_gpu(c.batch_per_gpu);
    if (c.compute_time_s) o->set_compute_time_s(*c.compute_time_s);
    if (c.measured_samples_per_s) o->set_measured_samples_per_s(*c.measured_samples_per_s);
  }
  if (in.contention) {
    out.mutable_contention()->set_a1(in.contention->a1);
    out.mutable_contention()->set_b1(in.contention->b1);
  }
  if (in.memory) {
    out.mutable_memory()->set_a2(in.memory->a2);
    out.mutable_memory()->set_b2(in.memory->b2);
  }
  if (in.loss) {
    pb::LossModel* l = out.mutable_loss();
    l->set_g1(in.loss->g1);
    l->set_g2(in.loss->g2);
    l->set_g3(in.loss->g3);
    l->set_g4(in.loss->g4);
    l->set_g5(in.loss->g5);
  }
  if (in.shared_ps) out.mutable_shared_ps()->set_queueing(in.shared_ps->queueing);
  out.set_model_variant(ToProto(in.variant));
  for (const predictor::ConvergenceModel& c : in.convergence) *out.add_convergence() = ToProto(c);
  if (in.sync == predictor::SyncKind::kAllReduce) out.set_sync(pb::SYNC_KIND_ALLREDUCE);
  if (in.global_batch == predictor::GlobalBatch::kScale) {
    out.set_global_batch(pb::GLOBAL_BATCH_SCALE);
  }
  for (const predictor::AllReduceModel& m : in.allreduce) {
    pb::AllReduceModel* a = out.add_allreduce();
    a->set_gpu_type(m.gpu_type);
    a->set_compute_fixed_s(m.compute_fixed_s);
    a->set_compute_per_sample_s(m.compute_per_sample_s);
    a->set_compute_contention(m.compute_contention);
    a->set_intra_fixed_s(m.intra_fixed_s);
    a->set_intra_ring_s(m.intra_ring_s);
    a->set_cross_instance(m.cross_instance);
    a->set_cross_fixed_s(m.cross_fixed_s);
    a->set_cross_straggler_s(m.cross_straggler_s);
    a->set_cross_per_gpu_s(m.cross_per_gpu_s);
    a->set_cross_pair_s(m.cross_pair_s);
    a->set_overlap_gamma(m.overlap_gamma);
    a->set_max_gpus_per_instance(m.max_gpus_per_instance);
  }
  out.set_global_batch_size(in.global_batch_size);
  out.set_local_batch_size(in.local_batch_size);
  if (in.restart_s) out.set_restart_s(*in.restart_s);
  if (in.checkpoint_every_s) out.set_checkpoint_every_s(*in.checkpoint_every_s);
  return out;
}

predictor::LrSchedule ToDomain(const pb::LrSchedule& in) {
  predictor::LrSchedule out;
  switch (in.kind()) {
    case pb::LrSchedule::KIND_STEP_DECAY:
      out.kind = predictor::LrSchedule::Kind::kStepDecay;
      break;
    case pb::LrSchedule::KIND_COSINE:
      out.kind = predictor::LrSchedule::Kind::kCosine;
      break;
    default:
      out.kind = predictor::LrSchedule::Kind::kConstant;
      break;
  }
  out.drop_steps.assign(in.drop_steps().begin(), in.drop_steps().end());
  out.drop_factors.assign(in.drop_factors().begin(), in.drop_factors().end());
  out.cosine_horizon_steps = in.cosine_horizon_steps();
  out.warmup_steps = in.warmup_steps();
  out.detected = in.detected();
  return out;
}

pb::LrSchedule ToProto(const predictor::LrSchedule& in) {
  pb::LrSchedule out;
  switch (in.kind) {
    case predictor::LrSchedule::Kind::kStepDecay:
      out.set_kind(pb::LrSchedule::KIND_STEP_DECAY);
      break;
    case predictor::LrSchedule::Kind::kCosine:
      out.set_kind(pb::LrSchedule::KIND_COSINE);
      break;
    case predictor::LrSchedule::Kind::kConstant:
      out.set_kind(pb::LrSchedule::KIND_CONSTANT);
      break;
  }
  for (double d : in.drop_steps) out.add_drop_steps(d);
  for (double f : in.drop_factors) out.add_drop_factors(f);
  out.set_cosine_horizon_steps(in.cosine_horizon_steps);
  out.set_warmup_steps(in.warmup_steps);
  out.set_detected(in.detected);
  return out;
}

predictor::ConvergenceModel ToDomain(const pb::ConvergenceModel& in) {
  predictor::ConvergenceModel out;
  out.metric = in.metric();
  out.higher_is_better = in.higher_is_better();
  if (in.has_ceiling()) out.ceiling = in.ceiling();
  out.form = in.form() == pb::ConvergenceModel::FORM_EQ3
                 ? predictor::ConvergenceModel::Form::kEq3
                 : predictor::ConvergenceModel::Form::kSaturating;
  out.floor = in.floor();
  out.floor_exp = in.floor_exp();
  out.amplitude = in.amplitude();
  if (in.has_scale()) out.scale = in.scale();
  if (in.has_shape()) out.shape = in.shape();
  out.scale_exp = in.scale_exp();
  out.g1 = in.g1();
  out.g3 = in.g3();
  out.g4 = in.g4();
  out.g5 = in.g5();
  out.schedule = ToDomain(in.schedule());
  if (in.has_rho()) out.rho = in.rho();
  out.drop_time_steps = in.drop_time_steps();
  out.noise_sd = in.noise_sd();
  out.noise_exp = in.noise_exp();
  out.noise_sd_after = in.noise_sd_after();
  out.noise_exp_after = in.noise_exp_after();
  out.noise_run_share = in.noise_run_share();
  out.eval_interval_steps = in.eval_interval_steps();
  out.eval_interval_per_worker_steps = in.eval_interval_per_worker_steps();
  out.drop_ratios.assign(in.drop_ratios().begin(), in.drop_ratios().end());
  out.drop_ratio_exp = in.drop_ratio_exp();
  out.runs = in.runs();
  out.points = in.points();
  out.fitted_on = in.fitted_on();
  if (in.has_best_value()) out.best_value = in.best_value();
  if (in.has_critical_batch()) out.critical_batch = in.critical_batch();
  out.reference_global_batch = in.reference_global_batch();
  return out;
}

pb::ConvergenceModel ToProto(const predictor::ConvergenceModel& in) {
  pb::ConvergenceModel out;
  out.set_metric(in.metric);
  out.set_higher_is_better(in.higher_is_better);
  out.set_ceiling(in.ceiling);
  out.set_form(in.form == predictor::ConvergenceModel::Form::kEq3
                   ? pb::ConvergenceModel::FORM_EQ3
                   : pb::ConvergenceModel::FORM_SATURATING);
  out.set_floor(in.floor);
  out.set_floor_exp(in.floor_exp);
  out.set_amplitude(in.amplitude);
  out.set_scale(in.scale);
  out.set_shape(in.shape);
  out.set_scale_exp(in.scale_exp);
  out.set_g1(in.g1);
  out.set_g3(in.g3);
  out.set_g4(in.g4);
  out.set_g5(in.g5);
  *out.mutable_schedule() = ToProto(in.schedule);
  out.set_rho(in.rho);
  out.set_drop_time_steps(in.drop_time_steps);
  out.set_noise_sd(in.noise_sd);
  out.set_noise_exp(in.noise_exp);
  out.set_noise_sd_after(in.noise_sd_after);
  out.set_noise_exp_after(in.noise_exp_after);
  out.set_noise_run_share(in.noise_run_share);
  out.set_eval_interval_steps(in.eval_interval_steps);
  out.set_eval_interval_per_worker_steps(in.eval_interval_per_worker_steps);
  for (double r : in.drop_ratios) out.add_drop_ratios(r);
  out.set_drop_ratio_exp(in.drop_ratio_exp);
  out.set_runs(in.runs);
  out.set_points(in.points);
  out.set_fitted_on(in.fitted_on);
  if (in.best_value) out.set_best_value(*in.best_value);
  if (in.critical_batch) out.set_critical_batch(*in.critical_batch);
  out.set_reference_global_batch(in.reference_global_batch);
  return out;
}

predictor::ModelVariant ToDomain(pb::ModelVariant variant) {
  switch (variant) {
    case pb::MODEL_VARIANT_SPOTDNN_PROTOTYPE:
      return predictor::ModelVariant::kSpotdnnPrototype;
    case pb::MODEL_VARIANT_SHARED_PS:
      return predictor::ModelVariant::kSharedPs;
    default:
      return predictor::ModelVariant::kPaper;
  }
}

pb::ModelVariant ToProto(predictor::ModelVariant variant) {
  switch (variant) {
    case predictor::ModelVariant::kSpotdnnPrototype:
      return pb::MODEL_VARIANT_SPOTDNN_PROTOTYPE;
    case predictor::ModelVariant::kSharedPs:
      return pb::MODEL_VARIANT_SHARED_PS;
    case predictor::ModelVariant::kPaper:
      break;
  }
  return pb::MODEL_VARIANT_PAPER;
}

absl::StatusOr<predictor::Target> TargetOf(double target_loss, double target_iterations,
                                           double target_epochs, double dataset_size,
                                           const pb::MetricTarget* metric,
                                           absl::string_view prefix) {
  if (metric == nullptr) {
    return TargetOf(target_loss, target_iterations, target_epochs, dataset_size, prefix);
  }
  if (target_loss != 0 || target_iterations != 0 || target_epochs != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%starget_metric is set, and %starget_loss = %g, %starget_iterations = %g, "
        "%starget_epochs = %g: give one target",
        prefix, prefix, target_loss, prefix, target_iterations, prefix, target_epochs));
  }
  if (dataset_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sdataset_size = %g: only with %starget_epochs", prefix, dataset_size, prefix));
  }
  const std::string& name = metric->metric();
  if (!limits::IsMetricName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "target_metric.metric = ", limits::Quote(name),
        ": must be a metric's name of 1 to 128 letters, digits and _ . - / : (\"accuracy\")"));
  }
  if (!std::isfinite(metric->value())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%starget_metric.value = %g: must be a finite number", prefix, metric->value()));
  }
  const bool at_least = metric->direction() == pb::MetricTarget::DIRECTION_AT_LEAST;
  if (!at_least && metric->direction() != pb::MetricTarget::DIRECTION_AT_MOST) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "target_metric.direction = ", EnumLabel(metric->direction()),
        ": say which way is better: at-least (higher is better, an accuracy) or at-most (a loss)"));
  }
  if (name == "loss") {
    if (at_least) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%starget_metric: loss >= %g: a loss target is reached at or below its value: give "
          "at-most",
          prefix, metric->value()));
    }
    return predictor::Target::Loss(metric->value());
  }
  if (name == "accuracy") {
    if (!at_least) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%starget_metric: accuracy <= %g: an accuracy target is reached at or above its value: "
          "give at-least",
          prefix, metric->value()));
    }
    if (!(metric->value() > 0 && metric->value() <= 1)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%starget_metric.value = %g: an accuracy is a fraction in (0, 1] (0.88 for 88%%)", prefix,
          metric->value()));
    }
  }
  return predictor::Target::Metric(name, at_least, metric->value());
}

absl::StatusOr<pb::MetricTarget> ParseMetricTarget(absl::string_view field,
                                                   absl::string_view text) {
  const auto expected = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", text, ": expected METRIC>=VALUE or METRIC<=VALUE (accuracy>=0.88, loss<=0.5)"));
  };
  const size_t ge = text.find(">="), le = text.find("<=");
  if ((ge == absl::string_view::npos) == (le == absl::string_view::npos)) return expected();
  const bool at_least = ge != absl::string_view::npos;
  const size_t at = at_least ? ge : le;
  const absl::string_view name = absl::StripAsciiWhitespace(text.substr(0, at));
  const absl::string_view number = absl::StripAsciiWhitespace(text.substr(at + 2));
  if (name.empty() || number.empty()) return expected();
  if (!limits::IsMetricName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", text, ": the metric ", limits::Quote(name),
                     " must be 1 to 128 letters, digits and _ . - / :"));
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", text, ": the value ", limits::Quote(number), " must be a finite number"));
  }
  if (name == "loss" && at_least) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", text, ": a loss is reached at or below its value: give loss<=", number));
  }
  if (name == "accuracy") {
    if (!at_least) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", text,
                       ": an accuracy is reached at or above its value: give accuracy>=", number));
    }
    if (!(value > 0 && value <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", text, ": an accuracy is a fraction in (0, 1] (0.88 for 88%)"));
    }
  }
  pb::MetricTarget out;
  out.set_metric(std::string(name));
  out.set_direction(at_least ? pb::MetricTarget::DIRECTION_AT_LEAST
                             : pb::MetricTarget::DIRECTION_AT_MOST);
  out.set_value(value);
  return out;
}

pb::MetricTarget MetricTargetOf(const predictor::Target& target) {
  pb::MetricTarget out;
  if (!target.is_metric()) return out;
  out.set_metric(target.MetricName());
  out.set_direction(target.kind == predictor::Target::Kind::kMetric && target.higher_is_better
                        ? pb::MetricTarget::DIRECTION_AT_LEAST
                        : pb::MetricTarget::DIRECTION_AT_MOST);
  out.set_value(target.value);
  return out;
}

absl::StatusOr<predictor::Target> TargetOf(double target_loss, double target_iterations,
                                           double target_epochs, double dataset_size,
                                           absl::string_view prefix) {
  const bool iterations = target_iterations != 0, epochs = target_epochs != 0;
  if (iterations + epochs + (target_loss != 0) > 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%starget_loss = %g, %starget_iterations = %g, %starget_epochs = %g: give one target",
        prefix, target_loss, prefix, target_iterations, prefix, target_epochs));
  }
  if (!epochs && dataset_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sdataset_size = %g: only with %starget_epochs", prefix, dataset_size, prefix));
  }
  if (iterations) {
    if (!(std::isfinite(target_iterations) && target_iterations >= 1 &&
          target_iterations == std::floor(target_iterations))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%starget_iterations = %g: must be a whole number >= 1", prefix, target_iterations));
    }
    if (target_iterations > predictor::kMaxTargetIterations) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%starget_iterations = %g: must be at most %g", prefix, target_iterations,
                          predictor::kMaxTargetIterations));
    }
    return predictor::Target::Iterations(target_iterations);
  }
  if (epochs) {
    if (!(std::isfinite(target_epochs) && target_epochs > 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%starget_epochs = %g: must be a positive number", prefix, target_epochs));
    }
    if (target_epochs > predictor::kMaxTargetEpochs) {
      return absl::InvalidArgumentError(absl::StrFormat("%starget_epochs = %g: must be at most %g",
                                                        prefix, target_epochs,
                                                        predictor::kMaxTargetEpochs));
    }
    if (dataset_size == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%sdataset_size is required with %starget_epochs: the samples in one epoch", prefix,
          prefix));
    }
    if (!(std::isfinite(dataset_size) && dataset_size >= 1 &&
          dataset_size == std::floor(dataset_size))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%sdataset_size = %g: must be a whole number of samples >= 1", prefix, dataset_size));
    }
    if (dataset_size > predictor::kMaxDatasetSize) {
      return absl::InvalidArgumentError(absl::StrFormat("%sdataset_size = %g: must be at most %g",
                                                        prefix, dataset_size,
                                                        predictor::kMaxDatasetSize));
    }
    return predictor::Target::Samples(target_epochs * dataset_size);
  }
  return predictor::Target::Loss(target_loss);
}

void SetTarget(double target_loss, double target_iterations, double target_epochs,
               double dataset_size, pb::Prediction* out) {
  out->set_target_loss(target_loss);
  out->set_target_iterations(target_iterations);
  out->set_target_epochs(target_epochs);
  out->set_dataset_size(dataset_size);
}

absl::StatusOr<predictor::Cluster> ToDomain(const pb::Cluster& in,
                                            const predictor::InstanceCatalog& catalog,
                                            absl::string_view field) {
  std::vector<std::pair<std::string, int>> counts;
  counts.reserve(in.instances_size());
  for (const pb::InstanceCount& c : in.instances())
    counts.emplace_back(c.instance_type(), c.count());
  auto cluster = predictor::MakeCluster(catalog, counts,
                                        in.parameter_servers() == 0 ? 1 : in.parameter_servers());
  if (!cluster.ok() && field != "cluster") {
    // MakeCluster names fields from "cluster"; say which cluster of a request it was.
    std::string message(cluster.status().message());
    if (message.rfind("cluster", 0) == 0) message = absl::StrCat(field, message.substr(7));
    return absl::Status(cluster.status().code(), message);
  }
  return cluster;
}

pb::Cluster ToProto(const predictor::Cluster& cluster, const predictor::InstanceCatalog& catalog) {
  pb::Cluster out;
  for (size_t k = 0; k < cluster.counts.size(); ++k) {
    if (cluster.counts[k] == 0) continue;
    pb::InstanceCount* c = out.add_instances();
    c->set_instance_type(catalog.types[k].name);
    c->set_count(cluster.counts[k]);
  }
  out.set_parameter_servers(cluster.parameter_servers);
  return out;
}

void EstimateToProto(const predictor::Estimate& e, pb::Prediction* out) {
  out->set_worker_count(e.workers);
  out->set_contention_probability(e.contention_probability);
  out->set_cluster_speed(e.cluster_speed);
  out->set_expected_iteration_time_s(e.expected_iteration_time_s);
  out->set_wa_batch(e.wa_batch);
  out->set_convergence_coefficient(e.convergence_coefficient);
  out->set_normalized_iterations(e.normalized_iterations);
  out->set_time_s(e.time_s);
  out->set_cost_usd(e.cost_usd);
  out->set_on_demand_cost_usd(e.on_demand_cost_usd);
  out->set_price_per_hour(e.price_per_hour);
  out->set_on_demand_price_per_hour(e.on_demand_price_per_hour);
  out->set_ps_utilization(e.ps_utilization);
  out->set_ps_response_time_s(e.ps_response_time_s);
  // Without a spread (eq. 3, an iterations or samples target) the interval is the point, when
  // the model left the percentiles unset.
  const bool spread = e.has_spread || e.iterations_p50 > 0;
  out->set_iterations_p10(spread ? e.iterations_p10 : e.normalized_iterations);
  out->set_iterations_p50(spread ? e.iterations_p50 : e.normalized_iterations);
  out->set_iterations_p90(spread ? e.iterations_p90 : e.normalized_iterations);
  out->set_time_p10_s(spread ? e.time_p10_s : e.time_s);
  out->set_time_p50_s(spread ? e.time_p50_s : e.time_s);
  out->set_time_p90_s(spread ? e.time_p90_s : e.time_s);
  out->set_has_spread(e.has_spread);
  out->set_extrapolated(e.extrapolated);
  if (e.data_best != 0) out->set_data_best(e.data_best);
}

pb::Prediction ToProto(const predictor::Prediction& p, const predictor::InstanceCatalog& catalog) {
  pb::Prediction out;
  EstimateToProto(p.estimate, &out);
  out.set_parameter_servers(p.parameter_servers);
  out.set_target_loss(p.target_loss);
  if (p.target.kind == predictor::Target::Kind::kMetric) {
    *out.mutable_target_metric() = MetricTargetOf(p.target);
  }
  for (const predictor::WorkerBreakdown& w : p.workers) {
    pb::WorkerPrediction* o = out.add_workers();
    o->set_instance_type(catalog.types[w.type_index].name);
    o->set_count(w.count);
    o->set_gpus(w.gpus);
    o->set_batch_size(w.batch_size);
    o->set_compute_time_s(w.compute_time_s);
    o->set_communication_time_s(w.communication_time_s);
    o->set_iteration_time_s(w.iteration_time_s);
    o->set_samples_per_s(w.samples_per_s);
    o->set_bandwidth_mb_per_s(w.bandwidth_mb_per_s);
    o->set_local_batch(w.local_batch);
  }
  out.set_accumulation_steps(p.accumulation_steps);
  if (p.accumulation_steps > 0) {
    // Synchronous: how the global batch followed the cluster, and the critical-batch law's terms.
    out.set_global_batch_mode(p.global_batch_mode == predictor::GlobalBatch::kScale
                                  ? pb::GLOBAL_BATCH_SCALE
                                  : pb::GLOBAL_BATCH_FIXED);
    out.set_reference_global_batch(p.reference_global_batch);
    if (p.critical_batch) out.set_critical_batch(*p.critical_batch);
    out.set_reference_iterations(p.reference_iterations);
  }
  return out;
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      limits::ValidUtf8(status.message(), limits::kMaxStatusMessageBytes));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

namespace {

// The prefix every value name of the enum shares, up to and including its last '_'
// ("PLAN_STRATEGY_" for PLAN_STRATEGY_EXACT, PLAN_STRATEGY_SPOTDNN, ...).
std::string CommonPrefix(const google::protobuf::EnumDescriptor& descriptor) {
  if (descriptor.value_count() == 0) return "";
  std::string prefix = descriptor.value(0)->name();
  for (int i = 1; i < descriptor.value_count(); ++i) {
    const std::string& name = descriptor.value(i)->name();
    size_t n = 0;
    while (n < prefix.size() && n < name.size() && prefix[n] == name[n]) ++n;
    prefix.resize(n);
  }
  const size_t underscore = prefix.rfind('_');
  return underscore == std::string::npos ? "" : prefix.substr(0, underscore + 1);
}

std::string Label(const google::protobuf::EnumDescriptor& descriptor, const std::string& name) {
  std::string label = absl::AsciiStrToLower(name.substr(CommonPrefix(descriptor).size()));
  std::replace(label.begin(), label.end(), '_', '-');
  return label;
}

}  // namespace

std::string EnumLabel(const google::protobuf::EnumDescriptor& descriptor, int value) {
  const google::protobuf::EnumValueDescriptor* v = descriptor.FindValueByNumber(value);
  if (v == nullptr) return absl::StrCat("unknown-", value);
  return Label(descriptor, v->name());
}

absl::StatusOr<int> ParseEnumLabel(const google::protobuf::EnumDescriptor& descriptor,
                                   absl::string_view field, absl::string_view label) {
  std::string wanted = absl::AsciiStrToLower(label);
  std::replace(wanted.begin(), wanted.end(), '_', '-');
  std::vector<std::string> labels;
  for (int i = 0; i < descriptor.value_count(); ++i) {
    std::string l = Label(descriptor, descriptor.value(i)->name());
    if (l == wanted) return descriptor.value(i)->number();
    labels.push_back(std::move(l));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " = \"", label, "\": expected one of ", absl::StrJoin(labels, ", ")));
}

}  // namespace spotdnn::services
