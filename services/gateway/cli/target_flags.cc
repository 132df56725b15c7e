#include "services/gateway/cli/target_flags.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

}  // namespace

std::string TargetFlags::Describe() const {
  if (iterations > 0) return absl::StrFormat("%.15g iterations", iterations);
  if (epochs > 0) return absl::StrFormat("%g epochs of %.15g samples", epochs, dataset_size);
  return absl::StrFormat("loss %g", loss);
}

absl::StatusOr<TargetFlags> ParseTargetFlags(const Args& args) {
  const int given = args.Has("--loss") + args.Has("--iterations") + args.Has("--epochs");
  if (given == 0) {
    return absl::InvalidArgumentError(
        "missing the target: give --loss L, --iterations N or --epochs E with --dataset-size S");
  }
  if (given > 1) {
    return absl::InvalidArgumentError(
        "--loss, --iterations and --epochs: give one target, not several");
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
