#include "services/gateway/cli/target_flags.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "services/common/convert.h"
#include "services/gateway/cli/output.h"

namespace spotdnn::gateway {
namespace {

// A whole number >= 1 (digits or floating notation such as 6.4e4).
absl::StatusOr<double> WholeNumber(absl::string_view flag, absl::string_view text,
                                   absl::string_view what) {
  auto v = ParseNumber(flag, text);
  if (!v.ok()) return v.status();
  if (*v > 1e15 && *v == std::floor(*v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " = \"", text, "\": too big: at most 1e15 ", what));
  }
  if (!(std::isfinite(*v) && *v >= 1 && *v == std::floor(*v))) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " = \"", text, "\": must be a whole number of ", what, " >= 1"));
  }
  return *v;
}

// --accuracy's value, or --target accuracy>=A's: a fraction in (0, 1].
absl::Status CheckAccuracy(absl::string_view flag, absl::string_view text, double value) {
  if (value > 0 && value <= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " = \"", text, "\": an accuracy is a fraction in (0, 1] (0.88 for 88%)"));
}

}  // namespace

absl::StatusOr<TargetFlags> ParseTargetExpression(absl::string_view flag, absl::string_view text) {
  auto m = services::ParseMetricTarget(flag, text);
  if (!m.ok()) return m.status();
  TargetFlags t;
  if (m->metric() == "loss") {
    t.loss = m->value();
  } else {
    t.metric = *std::move(m);
  }
  return t;
}

std::vector<FlagHelp> MetricTargetFlagHelp() {
  return {{"--loss", "L", "target training loss (the profile's loss model or convergence)"},
          {"--accuracy", "A",
           "instead: target accuracy, a fraction (0.88); needs the profile's accuracy\n"
           "convergence model (spotdnn profile fit)"},
          {"--target", "METRIC>=V|METRIC<=V",
           "instead: a target in any metric the samples carry, with its direction\n"
           "(accuracy>=0.88, top5>=0.9, loss<=0.5)"}};
}

std::string MetricTargetJson(const v1::MetricTarget& target) {
  return JsonObject()
      .String("metric", target.metric())
      .String("direction", services::EnumLabel(target.direction()))
      .Number("value", target.value())
      .str();
}

std::vector<std::string> BeyondTheDataRow(const v1::Prediction& p) {
  return {"beyond the data",
          absl::StrFormat("an extrapolation: the runs reached %.4g at best", p.data_best())};
}

std::string TargetFlags::Describe() const {
  if (metric) {
    return absl::StrFormat(
        "%s %s %g", metric->metric(),
        metric->direction() == v1::MetricTarget::DIRECTION_AT_LEAST ? ">=" : "<=", metric->value());
  }
  if (iterations > 0) return absl::StrFormat("%.15g iterations", iterations);
  if (epochs > 0) return absl::StrFormat("%g epochs of %.15g samples", epochs, dataset_size);
  return absl::StrFormat("loss %g", loss);
}

absl::StatusOr<TargetFlags> ParseTargetFlags(const Args& args) {
  const int given = args.Has("--loss") + args.Has("--iterations") + args.Has("--epochs") +
                    args.Has("--accuracy") + args.Has("--target");
  if (given == 0) {
    return absl::InvalidArgumentError(
        "missing the target: give --loss L, --accuracy A, --target METRIC>=V, --iterations N or "
        "--epochs E with --dataset-size S");
  }
  if (given > 1) {
    std::vector<std::string> named;
    for (const char* flag : {"--loss", "--accuracy", "--target", "--iterations", "--epochs"}) {
      if (auto v = args.Get(flag)) named.push_back(absl::StrCat(flag, " ", *v));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(absl::StrJoin(named, ", "), ": give one target, not several"));
  }
  if (args.Has("--dataset-size") && !args.Has("--epochs")) {
    return absl::InvalidArgumentError(
        "--dataset-size: only with --epochs (it says how many samples one epoch is)");
  }
  TargetFlags t;
  if (auto loss = args.Get("--loss")) {
    auto v = ParseNumber("--loss", *loss);
    if (!v.ok()) return v.status();
    t.loss = *v;
    return t;
  }
  if (auto target = args.Get("--target")) return ParseTargetExpression("--target", *target);
  if (auto accuracy = args.Get("--accuracy")) {
    auto v = ParseNumber("--accuracy", *accuracy);
    if (!v.ok()) return v.status();
    if (auto s = CheckAccuracy("--accuracy", *accuracy, *v); !s.ok()) return s;
    v1::MetricTarget m;
    m.set_metric("accuracy");
    m.set_direction(v1::MetricTarget::DIRECTION_AT_LEAST);
    m.set_value(*v);
    t.metric = std::move(m);
    return t;
  }
  if (auto iterations = args.Get("--iterations")) {
    auto v = WholeNumber("--iterations", *iterations, "global iterations (steps)");
    if (!v.ok()) return v.status();
    t.iterations = *v;
    return t;
  }
  const std::string epochs = *args.Get("--epochs");
  auto e = ParseNumber("--epochs", epochs);
  if (!e.ok()) return e.status();
  if (!(std::isfinite(*e) && *e > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--epochs = \"", epochs, "\": must be a positive number of epochs"));
  }
  t.epochs = *e;
  auto size = args.Get("--dataset-size");
  if (!size) {
    return absl::InvalidArgumentError(
        "missing required flag --dataset-size: the samples in one epoch, with --epochs");
  }
  auto s = WholeNumber("--dataset-size", *size, "samples");
  if (!s.ok()) return s.status();
  t.dataset_size = *s;
  return t;
}

absl::StatusOr<double> ParseBudgetFlag(const Args& args) {
  auto b = args.Get("--budget");
  if (!b) return 0.0;
  auto budget = ParseNumber("--budget", *b);
  if (!budget.ok()) return budget.status();
  if (!(*budget > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--budget = \"", *b, "\": must be a positive number of US dollars"));
  }
  return *budget;
}

absl::Status ParsePlanOptionFlags(const Args& args, v1::PlanOptions* options) {
  const std::string strategy = args.Get("--strategy").value_or("exact");
  if (strategy == "spotdnn") {
    options->set_strategy(v1::PLAN_STRATEGY_SPOTDNN);
  } else if (strategy == "exhaustive") {
    options->set_strategy(v1::PLAN_STRATEGY_EXHAUSTIVE);
  } else if (strategy != "exact") {
    return absl::InvalidArgumentError(
        absl::StrCat("--strategy = \"", strategy, "\": expected exact, spotdnn or exhaustive"));
  }
  options->set_on_demand_prices(args.Switch("--on-demand"));
  if (auto m = args.Get("--margin")) {
    auto margin = ParseNumber("--margin", *m);
    if (!margin.ok()) return margin.status();
    options->set_bandwidth_margin(*margin);
  }
  if (auto o = args.Get("--overhead")) {
    auto overhead = ParseDuration("--overhead", *o, /*allow_zero=*/true);
    if (!overhead.ok()) return overhead.status();
    options->set_revocation_overhead_s(*overhead);
  }
  if (auto n = args.Get("--parameter-servers")) {
    auto ps = ParseInt("--parameter-servers", *n, 1, 1000);
    if (!ps.ok()) return ps.status();
    options->set_parameter_servers(*ps);
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::gateway
