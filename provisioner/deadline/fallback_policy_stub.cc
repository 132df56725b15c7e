// A STUB of MakeDeadlinePolicy for `spotdnn run`'s on-demand fallback (issue 26, item 5), kept
// until the real policies ("ours", "uniform-progress", "greedy", "on-demand") land beside this
// header; the lead replaces this file with them at the merge. Every name gets the same simple,
// safe rule:
//
// - Spot gives what it can (all `wanted` when its capacity is unknown).
// - What spot cannot give runs on on-demand once the slack (time left minus the work left and one
//   changeover) is down to a margin of two changeovers and a tenth of the work left, or when
//   on-demand instances already run for it (their changeover is paid; they stay until spot
//   returns). Checked often, this never misses a deadline on-demand alone could still meet.
// - Back to spot when its capacity covers `wanted` and the slack still holds two changeovers;
//   else the on-demand instances finish the job.
#include <algorithm>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "provisioner/deadline/deadline_policy.h"

namespace spotdnn::provisioner::deadline {
namespace {

class SafeFallbackStub final : public DeadlinePolicy {
 public:
  explicit SafeFallbackStub(std::string name) : name_(std::move(name)) {}

  DeadlineDecision Decide(const DeadlineInput& in) override {
    const int wanted = std::max(0, in.wanted);
    const int available = in.spot_available < 0 ? wanted : std::min(in.spot_available, wanted);
    const double slack = in.time_left_s - in.work_left_s - in.changeover_s;
    const double margin = 2 * in.changeover_s + 0.1 * in.work_left_s;
    DeadlineDecision d;
    if (name_ == "on-demand") {
      d.on_demand = wanted;
      d.reason = "on-demand only";
      return d;
    }
    if (available >= wanted) {
      if (in.running_on_demand > 0 && slack < 2 * in.changeover_s) {
        d.spot = std::min(in.running_spot, wanted);
        d.on_demand = wanted - d.spot;
        d.reason = absl::StrFormat(
            "spot is back but the slack (%.0f s) is under two changeovers: "
            "on-demand finishes",
            slack);
      } else {
        d.spot = wanted;
        d.reason = in.running_on_demand > 0
                       ? absl::StrFormat("spot is back; slack %.0f s: back to spot", slack)
                       : "spot available";
      }
      return d;
    }
    d.spot = available;
    const int gap = wanted - available;
    if (slack <= margin) {
      d.on_demand = gap;
      d.reason = absl::StrFormat("spot short by %d; slack %.0f s <= margin %.0f s: %d on-demand",
                                 gap, slack, margin, gap);
    } else if (in.running_on_demand > 0) {
      d.on_demand = gap;
      d.reason = absl::StrFormat("spot short by %d; on-demand runs on until spot returns", gap);
    } else {
      d.reason = absl::StrFormat("spot short by %d; slack %.0f s > margin %.0f s: wait for spot",
                                 gap, slack, margin);
    }
    return d;
  }

  absl::string_view name() const override { return name_; }

 private:
  std::string name_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeadlinePolicy>> MakeDeadlinePolicy(absl::string_view name) {
  for (absl::string_view known : {"ours", "uniform-progress", "greedy", "on-demand"}) {
    if (name == known) return std::make_unique<SafeFallbackStub>(std::string(name));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "deadline policy = \"", name, "\": expected ours, uniform-progress, greedy or on-demand"));
}

}  // namespace spotdnn::provisioner::deadline
