// An online time/cost Pareto set of plans.
#ifndef SPOTDNN_PROVISIONER_PARETO_H_
#define SPOTDNN_PROVISIONER_PARETO_H_

#include <map>
#include <vector>

#include "provisioner/planner.h"

namespace spotdnn::provisioner {

// Plans no other plan beats in both time and cost; kept sorted by time, so cost falls with time.
class ParetoSet {
 public:
  // Adds `c` unless a kept plan is at least as good in both measures; drops the plans it beats.
  void Insert(const Candidate& c);
  // True when a kept plan is at least as fast as `time_s` and as cheap as `cost_usd`.
  bool Dominates(double time_s, double cost_usd) const;
  // The kept plans, fastest first.
  std::vector<Candidate> Plans() const;
  size_t size() const { return plans_.size(); }

 private:
  std::map<double, Candidate> plans_;  // by time_s
};

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_PARETO_H_
