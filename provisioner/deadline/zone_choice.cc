#include "provisioner/deadline/zone_choice.h"

#include <algorithm>

namespace spotdnn::provisioner::deadline {
namespace {

// The share of the watched time a zone had capacity, with one prior hour at one half (a zone
// never watched ranks between a reliable one and a dry one).
double SeenRate(const ZoneOption& z) { return (z.seen_up_s + 1800) / (z.seen_s + 3600); }

// Whether `a` comes before `b` among zones with capacity: the cheaper; at one price the one where
// spot has lasted longer (the expected stay, so the fewest moves), then the one with spot more of
// the time.
bool Before(const ZoneOption& a, const ZoneOption& b) {
  const double ca = a.spot_price_per_hour, cb = b.spot_price_per_hour;
  if (ca != cb) return ca < cb;
  if (a.expected_run_s != b.expected_run_s) return a.expected_run_s > b.expected_run_s;
  return SeenRate(a) > SeenRate(b);
}

}  // namespace

void ZoneHistory::Observe(bool up, double seconds) {
  if (!(seconds > 0)) return;
  if (up_ && !up && age_ > 0) {
    ended_.insert(std::upper_bound(ended_.begin(), ended_.end(), age_), age_);
    suffix_.assign(ended_.size() + 1, 0);
    for (size_t i = ended_.size(); i-- > 0;) suffix_[i] = suffix_[i + 1] + ended_[i];
  }
  if (up != up_) age_ = 0;
  up_ = up;
  seen_s_ += seconds;
  if (up) {
    seen_up_s_ += seconds;
    age_ += seconds;
  }
}

double ZoneHistory::ExpectedStay() const {
  constexpr double kPrior = 2 * 3600;
  if (ended_.empty()) return std::max(kPrior, up_ ? age_ : 0.0);
  if (!up_) return suffix_[0] / static_cast<double>(ended_.size());
  const size_t i = std::upper_bound(ended_.begin(), ended_.end(), age_) - ended_.begin();
  const size_t longer = ended_.size() - i;
  if (longer == 0) return age_;
  return suffix_[i] / static_cast<double>(longer) - age_;
}

double ZoneHistory::MedianStay() const {
  constexpr double kPrior = 2 * 3600;
  if (ended_.empty()) return std::max(kPrior, up_ ? age_ : 0.0);
  const double age = up_ ? age_ : 0.0;
  const size_t i = up_ ? std::upper_bound(ended_.begin(), ended_.end(), age) - ended_.begin() : 0;
  const size_t longer = ended_.size() - i;
  if (longer == 0) return age;
  const size_t mid = i + longer / 2;
  const double median = longer % 2 ? ended_[mid] : (ended_[mid - 1] + ended_[mid]) / 2;
  return median - age;
}

int CheapestSpotZone(const std::vector<ZoneOption>& zones, int current) {
  if (current >= 0 && current < static_cast<int>(zones.size()) && zones[current].has_capacity &&
      !zones[current].blocked) {
    return current;
  }
  int best = -1;
  for (int i = 0; i < static_cast<int>(zones.size()); ++i) {
    const ZoneOption& z = zones[i];
    if (!z.has_capacity || z.blocked) continue;
    if (best < 0 || z.spot_price_per_hour < zones[best].spot_price_per_hour) best = i;
  }
  return best;
}

int ChooseSpotZone(const std::vector<ZoneOption>& zones, const ZoneJob& job) {
  const int n = std::max(1, job.instances);
  const bool running = job.current >= 0 && job.current < static_cast<int>(zones.size()) &&
                       zones[job.current].has_capacity && !zones[job.current].blocked;
  // Not running: a start costs a changeover wherever it is, and where spot comes in short bursts
  // most starts buy little more than that. While the slack is above the floor, start only where
  // half the stretches seen at the zone's age lasted long enough to be worth it (the median rest,
  // not the mean: the mean is the odd long stretch's): at least `worth_stay_changeovers`, and the
  // more slack above the floor, the longer (a share of it), but never more than the work left
  // needs. A burst that has just begun is passed over until it has lasted as long as a long one.
  const double d = job.changeover_s;
  const double floor = job.wait_floor_changeovers * d;
  const bool choosy = !running && job.slack_s >= floor;
  const double worth = std::min(
      std::max(job.worth_stay_changeovers * d, job.worth_stay_slack_share * (job.slack_s - floor)),
      job.work_left_s + d);
  int best = -1;
  for (int i = 0; i < static_cast<int>(zones.size()); ++i) {
    const ZoneOption& z = zones[i];
    if (!z.has_capacity || z.blocked) continue;
    if (choosy && z.median_run_s < worth) continue;
    if (best < 0 || Before(z, zones[best])) best = i;
  }
  if (!running) return best;
  const ZoneOption& here = zones[job.current];
  if (best < 0 || best == job.current) return job.current;
  // A move restarts the job (a changeover at the new price, the progress of one changeover lost,
  // bought back at the end) and may copy the checkpoint: worth it when the expected stay there,
  // at most the work left, saves more than twice that, and the slack allows a changeover more.
  const ZoneOption& there = zones[best];
  const double stay = std::min(job.work_left_s, there.expected_run_s);
  const double n_instances = n;
  const double saving =
      n_instances * stay * (here.spot_price_per_hour - there.spot_price_per_hour) / 3600;
  const double cost =
      n_instances * 2 * (job.changeover_s + there.move_s) * there.spot_price_per_hour / 3600 +
      there.move_usd;
  const bool room = job.slack_s >= 2 * job.changeover_s + there.move_s;
  return saving > cost && room ? best : job.current;
}

}  // namespace spotdnn::provisioner::deadline
