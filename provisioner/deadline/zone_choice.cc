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

int ChooseSpotZone(const std::vector<ZoneOption>& zones, const ZoneJob& job) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(zones.size()); ++i) {
    const ZoneOption& z = zones[i];
    if (!z.has_capacity || z.blocked) continue;
    if (best < 0 || Before(z, zones[best])) best = i;
  }
  const int n = static_cast<int>(zones.size());
  if (job.current < 0 || job.current >= n) return best;
  const ZoneOption& here = zones[job.current];
  if (!here.has_capacity || here.blocked) return best;
  if (best < 0 || best == job.current) return job.current;
  // A move restarts the job (a changeover at the new price, the progress of one changeover lost,
  // bought back at the end) and may copy the checkpoint: worth it when the expected stay there,
  // at most the work left, saves more than twice that, and the slack allows a changeover more.
  const ZoneOption& there = zones[best];
  const double stay = std::min(job.work_left_s, there.expected_run_s);
  const double n_instances = std::max(1, job.instances);
  const double saving =
      n_instances * stay * (here.spot_price_per_hour - there.spot_price_per_hour) / 3600;
  const double cost =
      n_instances * 2 * (job.changeover_s + there.move_s) * there.spot_price_per_hour / 3600 +
      there.move_usd;
  const bool room = job.slack_s >= 2 * job.changeover_s + there.move_s;
  return saving > cost && room ? best : job.current;
}

}  // namespace spotdnn::provisioner::deadline
