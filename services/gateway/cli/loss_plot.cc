#include "services/gateway/cli/loss_plot.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "predictor/performance_model.h"
#include "services/common/convert.h"
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
                                    const std::vector<job::ProgressRecord>& progress) {
  if (job.started_ms <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id, " has not started: it has no curves to plot yet"));
  }
  LossPlot plot;
  for (const job::ProgressRecord& p : progress) {
    if (p.loss > 0 && std::isfinite(p.loss) && p.at_ms >= job.started_ms) {
      plot.actual.push_back({(p.at_ms - job.started_ms) / 1000.0, p.loss});
    }
  }
  if (plot.actual.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id,
                     " has no reported loss to plot: its workers print no loss in their "
                     "SPOTDNN_SAMPLE lines, or have reported nothing yet"));
  }
  if (auto spec = job::ParseJobSpec(job.spec_json); spec.ok()) plot.target_loss = spec->target_loss;
  pb::Plan plan;
  if (auto s = job::FromStoredJson(job.plan_json, "plan", &plan); !s.ok()) return s;
  plot.predicted_time_s = plan.time_s();
  if (job.finished_ms > job.started_ms) plot.finished_s = (job.finished_ms - job.started_ms) / 1e3;
  const double horizon =
      std::max({plot.actual.back().time_s, plot.predicted_time_s, plot.finished_s, 1.0});
  auto predicted = PredictedCurve(job, horizon);
  if (!predicted.ok()) return predicted.status();
  plot.predicted = std::move(*predicted);
  plot.title = absl::StrCat("Job ", job.id, ": predicted and actual loss");
  return plot;
}

std::string LossPlotSvg(const LossPlot& plot) {
  constexpr double kW = 760, kH = 460, kLeft = 80, kRight = 30, kTop = 50, kBottom = 60;
  double x_hi = std::max({plot.predicted_time_s, plot.finished_s, 1.0});
  double y_lo = plot.target_loss > 0 ? plot.target_loss : INFINITY, y_hi = 0;
  for (const auto* curve : {&plot.predicted, &plot.actual}) {
    for (const CurvePoint& p : *curve) {
      x_hi = std::max(x_hi, p.time_s);
      y_lo = std::min(y_lo, p.loss);
      y_hi = std::max(y_hi, p.loss);
    }
  }
  if (!std::isfinite(y_lo)) y_lo = 0;
  if (y_hi <= y_lo) y_hi = y_lo + 1;
  x_hi *= 1.03;
  const double pad = (y_hi - y_lo) * 0.05;
  y_lo = std::max(0.0, y_lo - pad);
  y_hi += pad;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double x) { return kLeft + x / x_hi * pw; };
  auto Y = [&](double y) { return kTop + (y_hi - y) / (y_hi - y_lo) * ph; };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">%s</text>\n",
      kW, kH, kW / 2, XmlEscape(plot.title));
  // Axes and ticks.
  absl::StrAppendFormat(&svg,
                        "<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"black\"/>\n",
                        kLeft, kTop, kTop + ph, kLeft + pw);
  for (int i = 0; i <= 5; ++i) {
    const double x = x_hi * i / 5, y = y_lo + (y_hi - y_lo) * i / 5;
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          X(x), kTop + ph + 18, Num(x), kLeft - 6, Y(y) + 4, Num(y));
  }
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">time since launch (s)</text>\n"
      "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">"
      "loss</text>\n",
      kLeft + pw / 2, kH - 14, kTop + ph / 2, kTop + ph / 2);
  // Reference lines: the target, the predicted and the actual end (labelled up from the axis).
  if (plot.target_loss > 0) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#2a9d4a\" "
        "stroke-dasharray=\"2 3\"/>\n<text x=\"%.1f\" y=\"%.1f\" "
        "text-anchor=\"end\" fill=\"#2a9d4a\">target %s</text>\n",
        kLeft, kLeft + pw, Y(plot.target_loss), Y(plot.target_loss), kLeft + pw - 4,
        Y(plot.target_loss) - 4, Num(plot.target_loss));
  }
  const struct {
    double at;
    const char* colour;
    const char* label;
  } ends[] = {{plot.predicted_time_s, "#4a7bd0", "predicted end"},
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
  // The curves, then the legend.
  const struct {
    const std::vector<CurvePoint>* points;
    const char* colour;
    const char* dash;
    const char* label;
  } curves[] = {{&plot.predicted, "#4a7bd0", "6 4", "predicted (first plan)"},
                {&plot.actual, "#d0702a", "none", "actual (smoothed)"}};
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
                          c.points == &plot.actual ? "actual" : "predicted", path, c.colour,
                          c.dash);
    const double ly = kTop + 14 + 18 * row++;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"2\" stroke-dasharray=\"%s\"/>\n<text x=\"%.1f\" "
                          "y=\"%.1f\">%s</text>\n",
                          kLeft + pw - 200, kLeft + pw - 170, ly, ly, c.colour, c.dash,
                          kLeft + pw - 164, ly + 4, c.label);
  }
  return svg + "</svg>\n";
}

}  // namespace spotdnn::gateway
