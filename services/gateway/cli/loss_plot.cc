#include "services/gateway/cli/loss_plot.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "predictor/convergence.h"
#include "predictor/performance_model.h"
#include "services/common/convert.h"
#include "services/gateway/job/convergence_watch.h"
#include "services/gateway/job/job_run.h"
#include "services/gateway/job/job_spec.h"
#include "spotdnn/v1/common.pb.h"

namespace spotdnn::gateway {
namespace {

namespace pb = ::spotdnn::v1;

constexpr int kPredictedPoints = 120;

// The first plan's predicted loss curve up to `horizon_s`; empty when the profile has no loss
// model (an iterations target) or the plan no cluster.
absl::StatusOr<std::vector<CurvePoint>> PredictedCurve(const job::JobRecord& job,
                                                       double horizon_s) {
  pb::WorkloadProfile workload;
  pb::InstanceCatalog catalog;
  pb::Plan plan;
  if (auto s = job::FromStoredJson(job.workload_json, "workload profile", &workload); !s.ok()) {
    return s;
  }
  if (auto s = job::FromStoredJson(job.catalog_json, "catalog", &catalog); !s.ok()) return s;
  if (auto s = job::FromStoredJson(job.plan_json, "plan", &plan); !s.ok()) return s;
  auto model = predictor::PerformanceModel::Create(
      services::ToDomain(workload), services::ToDomain(catalog), {.require_loss_model = false});
  if (!model.ok() || !model->has_loss_model()) return std::vector<CurvePoint>{};
  auto cluster = services::ToDomain(plan.cluster(), model->catalog(), "plan.cluster");
  if (!cluster.ok()) return cluster.status();
  auto curve = model->LossCurve(*cluster, horizon_s, kPredictedPoints);
  if (!curve.ok()) return std::vector<CurvePoint>{};  // e.g. a cluster the model cannot time
  std::vector<CurvePoint> out;
  for (const predictor::LossPoint& p : *curve) {
    if (std::isfinite(p.loss)) out.push_back({p.time_s, p.loss});
  }
  return out;
}

std::string Num(double v) { return absl::StrFormat("%.4g", v); }

std::string XmlEscape(const std::string& text) {
  return absl::StrReplaceAll(text,
                             {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

}  // namespace

absl::StatusOr<LossPlot> LossPlotOf(const job::JobRecord& job,
                                    const std::vector<job::ProgressRecord>& progress,
                                    const std::vector<job::InstanceRecord>& instances,
                                    const std::vector<job::RevocationRecord>& revocations,
                                    const std::vector<job::JobEventRecord>& events) {
  LossPlot plot;
  plot.title = absl::StrCat("Job ", job.id, ": predicted and actual loss");
  if (auto spec = job::ParseJobSpec(job.spec_json); spec.ok()) plot.target_loss = spec->target_loss;
  if (job.started_ms <= 0) {
    plot.title = absl::StrCat("Job ", job.id);
    plot.missing = absl::StrCat("job ", job.id, " has not started (", job::Name(job.state),
                                "): nothing to plot yet");
    return plot;
  }
  // What the instances had cost by `at_ms`.
  auto cost_at = [&](int64_t at_ms) {
    double cost = job.profiling_cost_usd;
    for (const job::InstanceRecord& i : instances) {
      const int64_t stop = i.ended_ms > 0 ? std::min(i.ended_ms, at_ms) : at_ms;
      cost += i.price_per_hour * std::max<int64_t>(0, stop - i.launched_ms) / 3.6e6;
    }
    return cost;
  };
  for (const job::ProgressRecord& p : progress) {
    if (p.at_ms < job.started_ms) continue;
    const double t = (p.at_ms - job.started_ms) / 1000.0;
    plot.progress.push_back({t, p.iterations, cost_at(p.at_ms)});
    if (p.loss > 0 && std::isfinite(p.loss)) plot.actual.push_back({t, p.loss});
  }
  for (const job::RevocationRecord& r : revocations) {
    const int64_t at = r.cloud_notice_ms > 0 ? r.cloud_notice_ms : r.received_ms;
    if (at >= job.started_ms)
      plot.revocations.push_back({(at - job.started_ms) / 1000.0, r.instance_id});
  }
  pb::Plan plan;
  if (auto s = job::FromStoredJson(job.plan_json, "plan", &plan); !s.ok()) return s;
  plot.predicted_time_s = plan.time_s();
  plot.planned_iterations = plan.prediction().normalized_iterations();
  if (job.finished_ms > job.started_ms) plot.finished_s = (job.finished_ms - job.started_ms) / 1e3;
  plot.cost_usd = cost_at(job.finished_ms > 0 ? job.finished_ms : absl::ToUnixMillis(absl::Now()));
  if (plot.actual.empty()) {
    plot.title = absl::StrCat("Job ", job.id, ": progress against the plan");
    plot.missing = plot.progress.empty()
                       ? "no progress reported yet"
                       : "no loss: the workers report none (no loss= in their SPOTDNN_SAMPLE "
                         "lines), so the loss curve and the target cannot be drawn";
    return plot;
  }
  const double horizon =
      std::max({plot.actual.back().time_s, plot.predicted_time_s, plot.finished_s, 1.0});
  auto predicted = PredictedCurve(job, horizon);
  if (!predicted.ok()) return predicted.status();
  plot.predicted = std::move(*predicted);
  // The latest refit's curve: its mean from the step it was made at, at the measured speed.
  std::optional<job::ConvergenceForecast> refit;
  for (const job::JobEventRecord& e : events) {
    if (e.kind != job::kForecastEvent) continue;
    if (auto f = job::ParseForecastJson(e.detail); f.ok() && !f->prior) refit = *f;
  }
  if (refit.has_value() && refit->steps_per_s > 0) {
    plot.refit_finish_p10_s = std::isfinite(refit->finish_p10_s) ? refit->finish_p10_s : 0;
    plot.refit_finish_p50_s = std::isfinite(refit->finish_p50_s) ? refit->finish_p50_s : 0;
    plot.refit_finish_p90_s = std::isfinite(refit->finish_p90_s) ? refit->finish_p90_s : 0;
    plot.refit_label =
        absl::StrFormat("refitted at step %.0f (%d points)", refit->step, refit->points);
    // To the p90 finish, or as far as the chart goes when the target is not reached.
    const double end_s = plot.refit_finish_p90_s > refit->elapsed_s
                             ? plot.refit_finish_p90_s
                             : std::max(horizon, refit->elapsed_s + 1);
    for (int i = 0; i <= kPredictedPoints; ++i) {
      const double t = refit->elapsed_s + (end_s - refit->elapsed_s) * i / kPredictedPoints;
      const double step = refit->step + (t - refit->elapsed_s) * refit->steps_per_s;
      const double value =
          predictor::MeanValueAt(refit->model, std::max(1, refit->workers), refit->r, step);
      if (std::isfinite(value)) plot.refitted.push_back({t, value});
    }
  }
  return plot;
}

std::vector<double> NiceTicks(double lo, double hi, int count) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, count);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  const double first = std::floor(lo / step + 1e-9) * step;
  for (double v = first; v < hi + step * (1 - 1e-9); v += step) {
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
    if (ticks.size() > 50) break;
  }
  return ticks;
}

std::string LossPlotSvg(const LossPlot& plot) {
  constexpr double kW = 760, kH = 460, kLeft = 80, kRight = 30, kTop = 50, kBottom = 80;
  // The y axis: the loss when one was reported, else the iterations.
  const bool loss = !plot.actual.empty();
  double x_hi = std::max({plot.predicted_time_s, plot.finished_s, plot.refit_finish_p90_s, 1.0});
  double y_lo = loss && plot.target_loss > 0 ? plot.target_loss : INFINITY, y_hi = 0;
  for (const auto* curve : {&plot.predicted, &plot.actual, &plot.refitted}) {
    for (const CurvePoint& p : *curve) {
      x_hi = std::max(x_hi, p.time_s);
      y_lo = std::min(y_lo, p.loss);
      y_hi = std::max(y_hi, p.loss);
    }
  }
  for (const ProgressPoint& p : plot.progress) x_hi = std::max(x_hi, p.time_s);
  if (!loss) {
    y_lo = 0;
    y_hi = plot.planned_iterations;
    for (const ProgressPoint& p : plot.progress) y_hi = std::max(y_hi, p.iterations);
  }
  if (!std::isfinite(y_lo)) y_lo = 0;
  if (y_hi <= y_lo) y_hi = y_lo + 1;
  const std::vector<double> x_ticks = NiceTicks(0, x_hi);
  const std::vector<double> y_ticks = NiceTicks(loss ? std::max(0.0, y_lo) : 0.0, y_hi);
  x_hi = x_ticks.back();
  y_lo = y_ticks.front();
  y_hi = y_ticks.back();
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double x) { return kLeft + x / x_hi * pw; };
  auto Y = [&](double y) { return kTop + (y_hi - y) / (y_hi - y_lo) * ph; };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">%s</text>\n",
      kW, kH, kW / 2, XmlEscape(plot.title));
  // Axes and round ticks.
  absl::StrAppendFormat(&svg,
                        "<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"black\"/>\n",
                        kLeft, kTop, kTop + ph, kLeft + pw);
  for (double x : x_ticks) {
    absl::StrAppendFormat(
        &svg, "<text class=\"xtick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
        X(x), kTop + ph + 18, Num(x));
  }
  for (double y : y_ticks) {
    absl::StrAppendFormat(
        &svg, "<text class=\"ytick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
        kLeft - 6, Y(y) + 4, Num(y));
  }
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">time since launch (s)</text>\n"
      "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">"
      "%s</text>\n",
      kLeft + pw / 2, kTop + ph + 40, kTop + ph / 2, kTop + ph / 2, loss ? "loss" : "iterations");
  // The target, labelled at the left end: the ends' labels stand at the right.
  if (loss && plot.target_loss > 0) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#2a9d4a\" "
        "stroke-dasharray=\"2 3\"/>\n<text x=\"%.1f\" y=\"%.1f\" "
        "text-anchor=\"start\" fill=\"#2a9d4a\">target %s</text>\n",
        kLeft, kLeft + pw, Y(plot.target_loss), Y(plot.target_loss), kLeft + 4,
        Y(plot.target_loss) - 4, Num(plot.target_loss));
  }
  // The refit's 80% interval of the finish as a band, under the ends' lines.
  if (loss && plot.refit_finish_p90_s > plot.refit_finish_p10_s && plot.refit_finish_p10_s > 0) {
    absl::StrAppendFormat(&svg,
                          "<rect class=\"refit-interval\" x=\"%.1f\" y=\"%.1f\" "
                          "width=\"%.1f\" height=\"%.1f\" fill=\"#8e44ad\" "
                          "fill-opacity=\"0.12\"/>\n",
                          X(plot.refit_finish_p10_s), kTop,
                          X(plot.refit_finish_p90_s) - X(plot.refit_finish_p10_s), ph);
  }
  const struct {
    double at;
    const char* colour;
    const char* label;
  } ends[] = {{plot.predicted_time_s, "#4a7bd0", "predicted end"},
              {loss ? plot.refit_finish_p50_s : 0, "#8e44ad", "refitted end"},
              {plot.finished_s, "#d0702a", "actual end"}};
  for (const auto& e : ends) {
    if (e.at <= 0) continue;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-dasharray=\"4 3\"/>\n<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\" "
                          "transform=\"rotate(-90 %.1f %.1f)\">%s %ss</text>\n",
                          X(e.at), X(e.at), kTop, kTop + ph, e.colour, X(e.at) - 4, kTop + ph - 6,
                          e.colour, X(e.at) - 4, kTop + ph - 6, e.label, Num(e.at));
  }
  // Revocation notices: a mark from the top, labelled with the instance.
  for (const RevocationMark& r : plot.revocations) {
    absl::StrAppendFormat(&svg,
                          "<line class=\"revocation\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" "
                          "y2=\"%.1f\" stroke=\"#c0392b\" stroke-dasharray=\"1 2\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\" fill=\"#c0392b\" font-size=\"10\" "
                          "transform=\"rotate(-90 %.1f %.1f)\" text-anchor=\"end\">revoked %s "
                          "%ss</text>\n",
                          X(r.time_s), X(r.time_s), kTop, kTop + ph, X(r.time_s) + 10, kTop + 4,
                          X(r.time_s) + 10, kTop + 4, XmlEscape(r.instance), Num(r.time_s));
  }
  // The curves, then the legend.
  std::vector<CurvePoint> iterations, plan_line;
  if (!loss) {
    for (const ProgressPoint& p : plot.progress) iterations.push_back({p.time_s, p.iterations});
    if (plot.planned_iterations > 0 && plot.predicted_time_s > 0) {
      plan_line = {{0, 0}, {plot.predicted_time_s, plot.planned_iterations}};
    }
  }
  const struct {
    const std::vector<CurvePoint>* points;
    const char* name;
    const char* colour;
    const char* dash;
    const char* label;
  } curves[] = {{&plot.predicted, "predicted", "#4a7bd0", "6 4", "predicted (first plan)"},
                {&plot.actual, "actual", "#d0702a", "none", "actual (smoothed)"},
                {&plot.refitted, "refitted", "#8e44ad", "3 3", plot.refit_label.c_str()},
                {&plan_line, "plan", "#4a7bd0", "6 4", "the plan's iterations"},
                {&iterations, "iterations", "#d0702a", "none", "iterations done"}};
  int row = 0;
  for (const auto& c : curves) {
    if (c.points->empty()) continue;
    std::string path;
    for (const CurvePoint& p : *c.points) {
      absl::StrAppendFormat(&path, "%s%.1f %.1f ", path.empty() ? "M" : "L", X(p.time_s),
                            Y(p.loss));
    }
    absl::StrAppendFormat(&svg,
                          "<path class=\"%s\" d=\"%s\" fill=\"none\" stroke=\"%s\" "
                          "stroke-width=\"2\" stroke-dasharray=\"%s\"/>\n",
                          c.name, path, c.colour, c.dash);
    const double ly = kTop + 14 + 18 * row++;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"2\" stroke-dasharray=\"%s\"/>\n<text x=\"%.1f\" "
                          "y=\"%.1f\">%s</text>\n",
                          kLeft + pw - 200, kLeft + pw - 170, ly, ly, c.colour, c.dash,
                          kLeft + pw - 164, ly + 4, c.label);
  }
  // The cost, and what could not be drawn.
  std::string footer =
      absl::StrFormat("cost: $%.4f%s", plot.cost_usd, plot.finished_s > 0 ? "" : " so far");
  if (!plot.missing.empty()) footer = absl::StrCat(footer, " | ", plot.missing);
  absl::StrAppendFormat(&svg,
                        "<text class=\"note\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n",
                        kLeft, kH - 12, XmlEscape(footer));
  return svg + "</svg>\n";
}

}  // namespace spotdnn::gateway
