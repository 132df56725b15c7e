// The exact optimizer. For a fixed cluster size n every worker gets the same bandwidth (eq. 8
// depends on |N| only), so each type's iteration time, rate 1/T_i, speed b_i/T_i and price are
// constants; a cluster's T_exp, b_w, cost per hour and R follow from sums over the counts. The
// search fixes counts type by type (depth-first) and prunes a subtree when a lower bound on every
// completion's cost (or time) cannot beat the incumbent or meet the SLO. Bounds come from
// continuous relaxations with the cardinality constraint sum(x) = n (exact for the linear and
// linear-fractional parts), so they hold whether or not adding workers speeds a cluster up. In the
// shared-ps variant a worker's communication time depends on the whole composition; the search
// then uses each type's fastest rate at size n (PerformanceModel::NetworkTime's lower bound), which
// keeps every bound a bound, and scores each leaf exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>

#include "predictor/equations.h"
#include "provisioner/pareto.h"
#include "provisioner/planner.h"
#include "provisioner/stop_poll.h"

namespace spotdnn::provisioner {
namespace {

// Relative slack on every bound comparison, far above floating-point error in the sums.
constexpr double kTolerance = 1e-9;

enum class Mode { kMinCost, kMinTime, kFrontier };

struct TypeAtSize {
  int k = 0;           // catalog index
  double rate = 0;     // 1 / T_i
  double speed = 0;    // b_i / T_i
  double price = 0;    // $/h
  int lo = 0, hi = 0;  // count bounds
};

// Linear sums over a partial cluster.
struct Sums {
  double rate = 0, speed = 0, price = 0;
  double vmax = 0;  // fastest per-worker speed among types present
};

struct Bound {
  double time_s;
  double cost_usd;
};

// Scratch room for the keys of a ranking: on the stack for the few types of a catalog (up to
// 16), on the heap beyond.
class KeyBuffer {
 public:
  explicit KeyBuffer(size_t n) {
    if (n > kSmall) {
      heap_.resize(n);
      data_ = heap_.data();
    }
  }
  KeyBuffer(const KeyBuffer&) = delete;
  KeyBuffer& operator=(const KeyBuffer&) = delete;
  double* data() { return data_; }

  static constexpr size_t kSmall = 16;

 private:
  double small_[kSmall];
  std::vector<double> heap_;
  double* data_ = small_;
};

// idx = 0..n-1 ordered by key, ascending, in the order std::sort gives: for up to 16 keys
// std::sort is an insertion sort, which keeps equal keys in index order, and so is this one (the
// hot spot of the simulator's re-plans, without std::sort's overhead).
void OrderByKey(const double* key, size_t n, std::vector<int>& idx) {
  std::iota(idx.begin(), idx.end(), 0);
  if (n <= KeyBuffer::kSmall) {
    for (size_t i = 1; i < n; ++i) {
      const int v = idx[i];
      size_t j = i;
      while (j > 0 && key[v] < key[idx[j - 1]]) {
        idx[j] = idx[j - 1];
        --j;
      }
      idx[j] = v;
    }
  } else {
    std::sort(idx.begin(), idx.end(), [&](int i, int j) { return key[i] < key[j]; });
  }
}

// min over y of (a0 + sum y_i a_i) / (b0 + sum y_i b_i) with sum y = m, 0 <= y_i <= cap_i (the
// continuous relaxation), by Dinkelbach's method; denominators are positive.
double MinRatio(double a0, double b0, const std::vector<double>& a, const std::vector<double>& b,
                const std::vector<int>& cap, int m, std::vector<int>& idx,
                double* den_at_min = nullptr) {
  const size_t n = a.size();
  idx.resize(n);
  if (m == 0) {  // nothing to place: the ratio of the base (what the iterations below return)
    if (den_at_min != nullptr) *den_at_min = b0;
    return a0 / b0;
  }
  // The keys a_i - lambda b_i, computed once per lambda.
  KeyBuffer keys(n);
  double* key = keys.data();
  auto best_for = [&](double lambda, double& num, double& den) {
    for (size_t i = 0; i < n; ++i) key[i] = a[i] - lambda * b[i];
    OrderByKey(key, n, idx);
    num = a0;
    den = b0;
    int left = m;
    for (int i : idx) {
      if (left == 0) break;
      const int take = std::min(left, cap[i]);
      num += take * a[i];
      den += take * b[i];
      left -= take;
    }
  };
  double num, den;
  best_for(a0 > 0 && b0 > 0 ? a0 / b0 : 0.0, num, den);
  double lambda = num / den;
  for (int iter = 0; iter < 50; ++iter) {
    best_for(lambda, num, den);
    const double next = num / den;
    // A fixed point repeats itself to the last iteration (best_for is deterministic), so stop
    // there: the same answer. Without this, a negative ratio (the b_w upper bound) never met
    // the relative test below and ran all 50 iterations: most of a re-plan's time.
    if (next == lambda) break;
    if (!(next < lambda * (1 - 1e-15) - 1e-300)) break;
    lambda = next;
  }
  if (den_at_min != nullptr) *den_at_min = den;
  return std::min(lambda, num / den);
}

// A lower bound on min (a0 + sum y_i a_i) s.t. b0 + sum y_i b_i >= q, sum y = m, 0 <= y_i <=
// cap_i (a linear program), by Lagrangian duality: every multiplier mu >= 0 gives
// L(mu) = a0 + mu (q - b0) + min_{sum y = m} sum y_i (a_i - mu b_i) <= the optimum. The multiplier
// is searched by bisection on the sign of the constraint's slack; the best L seen is returned.
double MinSumWithFloor(double a0, double b0, const std::vector<double>& a,
                       const std::vector<double>& b, const std::vector<int>& cap, int m, double q,
                       std::vector<int>& idx) {
  const size_t n = a.size();
  idx.resize(n);
  // The keys a_i - mu b_i, computed once per multiplier.
  KeyBuffer keys(n);
  double* key = keys.data();
  // Returns L(mu) and the slack q - (b0 + sum y b) of the minimising y.
  auto dual = [&](double mu, double& slack) {
    for (size_t i = 0; i < n; ++i) key[i] = a[i] - mu * b[i];
    OrderByKey(key, n, idx);
    double value = a0 + mu * (q - b0);
    double den = b0;
    int left = m;
    for (int i : idx) {
      if (left == 0) break;
      const int take = std::min(left, cap[i]);
      value += take * (a[i] - mu * b[i]);
      den += take * b[i];
      left -= take;
    }
    slack = q - den;
    return value;
  };
  double slack = 0;
  double best = dual(0, slack);
  if (slack <= 0) return best;  // the cheapest completion already meets the floor
  double lo = 0, hi = 1;
  for (int i = 0; i < 60; ++i) {
    const double value = dual(hi, slack);
    best = std::max(best, value);
    if (slack <= 0) break;
    lo = hi;
    hi *= 4;
  }
  for (int i = 0; i < 14; ++i) {
    const double mid = 0.5 * (lo + hi);
    best = std::max(best, dual(mid, slack));
    (slack > 0 ? lo : hi) = mid;
  }
  return best;
}

// The parts of a node's bounds that depend only on the problem's shape, the cluster size and the
// counts fixed above the node (SearchMemo keeps them).
struct StaticBound {
  double rate_ub = 0, price_lb = 0, price_ub = 0;  // extremes of the linear sums
  double ratio_lb = 0, rate_at_ratio_lb = 0;       // price / rate, relaxed
  double bw_lb = 0, bw_ub = 0;                     // b_w
  double r_lb = 0;                                 // R
  double base_price = 0, base_rate = 0;            // fixed counts and the rest's lower bounds
  int free = 0;                                    // workers above the rest's lower bounds
};

// A search node in the memo: its static bound and its children by count (x - x_min).
struct MemoNode {
  bool have = false;
  StaticBound bound;
  std::vector<std::unique_ptr<MemoNode>> children;
};

// What a cluster size sets up before its search.
struct SizeSetup {
  std::vector<TypeAtSize> types;
  std::vector<int> min_after, max_after;
  double batch_min = 0, batch_max = 0;  // of the usable types at this size
  // Per depth, the prices, rates and free counts (hi - lo) of the types from there on.
  std::vector<std::vector<double>> prices_from, rates_from;
  std::vector<std::vector<int>> caps_from;
};

struct MemoSize {
  bool have = false;
  double network_time_s = 0;  // the model's at this size when it was set up
  SizeSetup setup;
  MemoNode root;
};

// What a search's static bounds read from the model and the problem, besides the network time
// per size (MemoSize checks that): a memo is of one shape whatever the objects' addresses.
std::vector<double> Shape(const PerformanceModel& m, const PlanProblem& p) {
  std::vector<double> shape = {static_cast<double>(p.parameter_servers),
                               p.on_demand ? 1.0 : 0.0,
                               m.NetworkTimeIsExact() ? 1.0 : 0.0,
                               m.coefficients().convergence_weight,
                               m.catalog().parameter_server.spot_price_per_hour,
                               m.catalog().parameter_server.on_demand_price_per_hour};
  for (size_t k = 0; k < m.types().size(); ++k) {
    const predictor::TypeModel& t = m.types()[k];
    const predictor::InstanceType& it = m.catalog().types[k];
    shape.insert(shape.end(),
                 {t.usable ? 1.0 : 0.0, static_cast<double>(t.batch_size), t.compute_time_s,
                  t.pcie_time_s, it.spot_price_per_hour, it.on_demand_price_per_hour,
                  static_cast<double>(p.min_counts[k]), static_cast<double>(p.max_counts[k])});
  }
  return shape;
}

// Most nodes one memo holds; it starts over when a search begins above it, and stops adding
// nodes during a search that reaches it.
constexpr size_t kMaxMemoNodes = 2'000'000;

}  // namespace

struct SearchMemo::Impl {
  std::vector<double> shape;
  std::vector<std::unique_ptr<MemoSize>> sizes;  // by cluster size
  size_t nodes = 0;

  // Makes the memo one of `problem`'s shape (starting over when it was of another, or full).
  void Fit(const PerformanceModel& m, const PlanProblem& problem) {
    std::vector<double> now = Shape(m, problem);
    if (now == shape && nodes < kMaxMemoNodes) return;
    shape = std::move(now);
    sizes.clear();
    nodes = 0;
  }
  // Size n's entry, set up afresh when the model's network time there is not the one it was set
  // up with.
  MemoSize& Size(int n, double network_time_s) {
    if (sizes.size() <= static_cast<size_t>(n)) sizes.resize(n + 1);
    if (!sizes[n] || sizes[n]->network_time_s != network_time_s) {
      sizes[n] = std::make_unique<MemoSize>();
      sizes[n]->network_time_s = network_time_s;
    }
    return *sizes[n];
  }
};

SearchMemo::SearchMemo() : impl_(std::make_unique<Impl>()) {}
SearchMemo::~SearchMemo() = default;
size_t SearchMemo::nodes() const { return impl_->nodes; }

namespace {

class BranchAndBound {
 public:
  BranchAndBound(const PerformanceModel& model, const PlanProblem& problem, Mode mode,
                 ParetoSet* front)
      : model_(model), problem_(problem), mode_(mode), front_(front), poll_(problem.stop, 1024) {
    const auto& c = model.coefficients();
    r_weight_ = c.convergence_weight;
    j_slack_ = c.integer_iterations ? 0.5 : 0;
    bw_slack_ = c.wa_batch_step / 2;
    t_slack_ = c.time_step / 2;
    if (model.has_loss_model()) loss_ = *model.profile().loss;
    // Eq. 3 bounds the steps to a loss only when it is what predicts them: not when the profile
    // has a convergence model of the loss.
    eq3_bound_ =
        model.has_loss_model() &&
        std::none_of(model.profile().convergence.begin(), model.profile().convergence.end(),
                     [](const predictor::ConvergenceModel& c) { return c.metric == "loss"; });
    // Shared-ps: a type's rate at size n also depends on the composition; the rates below are
    // upper bounds (NetworkTime is a lower bound on R), so the bounds hold, but those built from
    // ratios of speeds (R, b_w) need the cruder forms below.
    exact_rates_ = model.NetworkTimeIsExact();
    counts_.assign(problem.max_counts.size(), 0);
    for (size_t k = 0; k < problem.max_counts.size(); ++k) {
      if (model.types()[k].usable && problem.max_counts[k] > 0) usable_.push_back(k);
    }
    if (problem.memo != nullptr) {
      memo_ = &problem.memo->impl();
      memo_->Fit(model, problem);
    }
  }

  void Seed(const PlanResult& seed) {
    if (seed.feasible && Better(seed.best, result_.best, ObjectiveOf(mode_))) {
      result_.best = seed.best;
      result_.feasible = true;
    }
  }

  PlanResult Run() {
    // 64-bit sums: quotas are bounded per type, not their number.
    int64_t n_min = 0, n_max = 0;
    for (size_t k = 0; k < problem_.max_counts.size(); ++k) {
      n_min += problem_.min_counts[k];
      n_max += problem_.max_counts[k];
    }
    n_min = std::max<int64_t>(n_min, 1);
    n_max = std::min<int64_t>(
        n_max, problem_.max_workers > 0 ? problem_.max_workers : predictor::kMaxClusterSize);
    for (int64_t n = n_min; n <= n_max && poll_.Tick(); ++n) SolveSize(static_cast<int>(n));
    result_.stopped = poll_.status();
    return result_;
  }

 private:
  static Objective ObjectiveOf(Mode mode) {
    return mode == Mode::kMinTime ? Objective::kMinTime : Objective::kMinCost;
  }

  // The types at size n in search order, and the count bounds after each depth.
  void SetUp(double network, SizeSetup& s) const {
    s.types.clear();
    for (size_t k : usable_) {
      const predictor::TypeModel& t = model_.types()[k];
      const predictor::InstanceType& it = model_.catalog().types[k];
      TypeAtSize a;
      a.k = static_cast<int>(k);
      a.rate = 1.0 / (t.compute_time_s + network + t.pcie_time_s);
      a.speed = t.batch_size * a.rate;
      a.price = problem_.on_demand ? it.on_demand_price_per_hour : it.spot_price_per_hour;
      a.lo = problem_.min_counts[k];
      a.hi = problem_.max_counts[k];
      s.types.push_back(a);
    }
    if (s.types.empty()) return;
    s.batch_min = std::numeric_limits<double>::infinity();
    s.batch_max = 0;
    for (const TypeAtSize& a : s.types) {
      const double b = model_.types()[a.k].batch_size;
      s.batch_min = std::min(s.batch_min, b);
      s.batch_max = std::max(s.batch_max, b);
    }
    // Types whose batch differs most from the rest first: j depends on the WA batch, and fixing
    // those counts early narrows its range (and so tightens every bound below); then the
    // cost-efficient ones (least $ per iteration rate), so good plans turn up early.
    std::sort(s.types.begin(), s.types.end(), [&](const TypeAtSize& a, const TypeAtSize& b) {
      const int ba = model_.types()[a.k].batch_size, bb = model_.types()[b.k].batch_size;
      if (ba != bb) return ba > bb;
      return a.price / a.rate < b.price / b.rate;
    });
    const size_t depth_count = s.types.size();
    s.min_after.assign(depth_count + 1, 0);
    s.max_after.assign(depth_count + 1, 0);
    for (size_t d = depth_count; d-- > 0;) {
      s.min_after[d] = s.min_after[d + 1] + s.types[d].lo;
      s.max_after[d] = s.max_after[d + 1] + s.types[d].hi;
    }
    s.prices_from.assign(depth_count, {});
    s.rates_from.assign(depth_count, {});
    s.caps_from.assign(depth_count, {});
    for (size_t d = 0; d < depth_count; ++d) {
      for (size_t i = d; i < depth_count; ++i) {
        s.prices_from[d].push_back(s.types[i].price);
        s.rates_from[d].push_back(s.types[i].rate);
        s.caps_from[d].push_back(s.types[i].hi - s.types[i].lo);
      }
    }
  }

  void SolveSize(int n) {
    n_ = n;
    const double network = model_.NetworkTime(n, problem_.parameter_servers);
    MemoNode* root_node = nullptr;
    if (memo_ != nullptr) {
      MemoSize& m = memo_->Size(n, network);
      if (!m.have) {
        SetUp(network, m.setup);
        m.have = true;
      }
      size_ = &m.setup;
      root_node = &m.root;
    } else {
      SetUp(network, own_size_);
      size_ = &own_size_;
    }
    if (size_->types.empty()) return;
    if (n < size_->min_after[0] || n > size_->max_after[0]) return;
    Sums root;
    root.price = problem_.parameter_servers *
                 (problem_.on_demand ? model_.catalog().parameter_server.on_demand_price_per_hour
                                     : model_.catalog().parameter_server.spot_price_per_hour);
    Dfs(0, n, root, root_node);
  }

  // The parts of the bounds of a node (types [depth, end) take `left` workers between their
  // bounds) that do not depend on the target, the progress, the deadline or the overhead.
  StaticBound ComputeStaticBound(size_t depth, int left, const Sums& fixed) {
    const std::vector<TypeAtSize>& types = size_->types;
    StaticBound sb;
    Sums base = fixed;
    const size_t rest = types.size() - depth;
    a_.resize(rest);
    b_.resize(rest);
    cap_.resize(rest);
    int free = left;
    double v_max = fixed.vmax;
    for (size_t i = 0; i < rest; ++i) {
      const TypeAtSize& t = types[depth + i];
      base.rate += t.lo * t.rate;
      base.speed += t.lo * t.speed;
      base.price += t.lo * t.price;
      free -= t.lo;
      cap_[i] = t.hi - t.lo;
      if (t.hi > 0) v_max = std::max(v_max, t.speed);
    }
    // Extremes of the linear sums: the `free` workers go to the types with the largest (smallest)
    // values, as far as their caps allow.
    auto extreme = [&](auto value, bool largest) {
      order_.resize(rest);
      std::iota(order_.begin(), order_.end(), 0);
      std::sort(order_.begin(), order_.end(),
                [&](int i, int j) { return largest ? value(i) > value(j) : value(i) < value(j); });
      double sum = 0;
      int m = free;
      for (int i : order_) {
        if (m == 0) break;
        const int take = std::min(m, cap_[i]);
        sum += take * value(i);
        m -= take;
      }
      return sum;
    };
    auto rate = [&](int i) { return types[depth + i].rate; };
    auto speed = [&](int i) { return types[depth + i].speed; };
    auto price = [&](int i) { return types[depth + i].price; };
    sb.rate_ub = base.rate + extreme(rate, true);
    sb.price_lb = base.price + extreme(price, false);
    sb.price_ub = base.price + extreme(price, true);

    // Cost per hour over iteration rate (the part of cost that is linear-fractional).
    for (size_t i = 0; i < rest; ++i) {
      a_[i] = price(i);
      b_[i] = rate(i);
    }
    sb.ratio_lb = MinRatio(base.price, base.rate, a_, b_, cap_, free, idx_, &sb.rate_at_ratio_lb);
    // b_w = speed / rate, both ways; with inexact rates, b_w is still an average of the batches.
    sb.bw_lb = size_->batch_min;
    sb.bw_ub = size_->batch_max;
    if (exact_rates_) {
      for (size_t i = 0; i < rest; ++i) a_[i] = speed(i);
      sb.bw_lb = MinRatio(base.speed, base.rate, a_, b_, cap_, free, idx_);
      for (size_t i = 0; i < rest; ++i) a_[i] = -speed(i);
      sb.bw_ub = -MinRatio(-base.speed, base.rate, a_, b_, cap_, free, idx_);
    }

    // R >= (1 - w_1) sqrt(n / (n - 1)), w_1 = v_fastest / v at most v_max / (least v).
    if (r_weight_ > 0 && n_ > 1 && exact_rates_) {
      const double speed_lb = base.speed + extreme(speed, false);
      const double w1_ub = speed_lb > 0 ? std::min(1.0, v_max / speed_lb) : 1.0;
      sb.r_lb = (1 - w1_ub) * std::sqrt(static_cast<double>(n_) / (n_ - 1));
    }
    sb.base_price = base.price;
    sb.base_rate = base.rate;
    sb.free = free;
    return sb;
  }

  // Lower bounds on time and cost over every completion of the node, from its static part.
  Bound ComputeBound(size_t depth, const StaticBound& sb) {
    double j_lb = 0;
    const double k_arg = r_weight_ * sb.r_lb + loss_.g4;
    const double a_lb = loss_.g2 >= 0 ? loss_.g2 * (sb.bw_lb - bw_slack_) + loss_.g3
                                      : loss_.g2 * (sb.bw_ub + bw_slack_) + loss_.g3;
    if (problem_.target_kind == predictor::Target::Kind::kIterations) {
      j_lb = std::max(0.0, problem_.target_amount - j_slack_);
    } else if (problem_.target_kind == predictor::Target::Kind::kSamples) {
      // j = samples / b_w, at least samples / the largest b_w.
      if (sb.bw_ub + bw_slack_ > 0) {
        j_lb = std::max(0.0, problem_.target_amount / (sb.bw_ub + bw_slack_) - j_slack_);
      }
    } else if (problem_.target_kind == predictor::Target::Kind::kLoss && eq3_bound_ && k_arg >= 0 &&
               a_lb > 0) {
      // (A metric target, or a loss a convergence model predicts, has no closed-form bound on
      // its steps: j_lb stays 0, a valid if loose bound.)
      const double ak = a_lb * std::sqrt(k_arg * n_);
      j_lb = ak / (problem_.target_loss - loss_.g5) - loss_.g1;
      if (std::isfinite(problem_.current_loss)) {
        j_lb = std::min(j_lb, ak * (1 / (problem_.target_loss - loss_.g5) -
                                    1 / (problem_.current_loss - loss_.g5)));
      }
      j_lb = std::max(0.0, j_lb - j_slack_);
    }
    const double extra = problem_.overhead_s - t_slack_;
    Bound bound;
    bound.time_s = j_lb / sb.rate_ub + extra;
    // Cost is j * (price / rate). A plan meeting the deadline has rate >= j / (deadline - extra)
    // >= rate_floor. price / rate is quasiconvex along the relaxation's lower price boundary, so
    // when its unconstrained minimum is slower than the floor, the constrained minimum is at the
    // floor: at least min{price : rate >= floor} / floor.
    double ratio = sb.ratio_lb;
    const double budget_time = problem_.deadline_s - extra;
    if (std::isfinite(budget_time) && budget_time > 0 && j_lb > 0) {
      const double rate_floor = j_lb / budget_time * (1 - kTolerance);
      if (rate_floor > sb.rate_at_ratio_lb && rate_floor <= sb.rate_ub) {
        ratio =
            std::max(ratio, MinSumWithFloor(sb.base_price, sb.base_rate, size_->prices_from[depth],
                                            size_->rates_from[depth], size_->caps_from[depth],
                                            sb.free, rate_floor, idx_) /
                                rate_floor);
      }
    }
    bound.cost_usd = (j_lb * ratio + extra * (extra >= 0 ? sb.price_lb : sb.price_ub)) / 3600.0;
    return bound;
  }

  bool Prune(const Bound& b) const {
    const double t = b.time_s * (1 - kTolerance);
    const double c = b.cost_usd * (1 - kTolerance);
    if (t > problem_.deadline_s || c > problem_.budget_usd) return true;
    switch (mode_) {
      case Mode::kMinCost:
        return result_.feasible && c > result_.best.cost_usd;
      case Mode::kMinTime:
        return result_.feasible && t > result_.best.time_s;
      case Mode::kFrontier:
        return front_->Dominates(t, c);
    }
    return false;
  }

  void Leaf() {
    ++result_.evaluated;
    if (!Score(model_, problem_, counts_, candidate_) || !MeetsSlo(problem_, candidate_)) return;
    if (mode_ == Mode::kFrontier) {
      front_->Insert(candidate_);
      return;
    }
    if (Better(candidate_, result_.best, ObjectiveOf(mode_))) {
      result_.best = candidate_;
      result_.feasible = true;
    }
  }

  // `node`: the memo's entry for this node, or null (no memo, or the memo is full).
  void Dfs(size_t depth, int left, const Sums& sums, MemoNode* node) {
    if (!poll_.Tick()) return;
    ++result_.nodes;
    const std::vector<TypeAtSize>& types = size_->types;
    const TypeAtSize& t = types[depth];
    if (depth + 1 == types.size()) {
      if (left < t.lo || left > t.hi) return;
      counts_[t.k] = left;
      Leaf();
      counts_[t.k] = 0;
      return;
    }
    const int x_min = std::max(t.lo, left - size_->max_after[depth + 1]);
    const int x_max = std::min(t.hi, left - size_->min_after[depth + 1]);
    if (node != nullptr) {
      if (!node->have) {
        node->bound = ComputeStaticBound(depth, left, sums);
        node->have = true;
        node->children.resize(std::max(0, x_max - x_min + 1));
      }
      if (Prune(ComputeBound(depth, node->bound))) return;
    } else if (Prune(ComputeBound(depth, ComputeStaticBound(depth, left, sums)))) {
      return;
    }
    for (int x = x_max; x >= x_min; --x) {
      Sums next = sums;
      next.rate += x * t.rate;
      next.speed += x * t.speed;
      next.price += x * t.price;
      if (x > 0) next.vmax = std::max(next.vmax, t.speed);
      counts_[t.k] = x;
      MemoNode* child = nullptr;
      if (node != nullptr && depth + 2 < types.size()) {  // (a leaf has no bound to keep)
        std::unique_ptr<MemoNode>& slot = node->children[x - x_min];
        if (!slot && memo_->nodes < kMaxMemoNodes) {
          slot = std::make_unique<MemoNode>();
          ++memo_->nodes;
        }
        child = slot.get();
      }
      Dfs(depth + 1, left - x, next, child);
    }
    counts_[t.k] = 0;
  }

  const PerformanceModel& model_;
  const PlanProblem& problem_;
  const Mode mode_;
  ParetoSet* front_;
  StopPoll poll_;
  double r_weight_ = 0, j_slack_ = 0, bw_slack_ = 0, t_slack_ = 0;
  bool exact_rates_ = true;
  predictor::LossModel loss_;
  bool eq3_bound_ = false;  // a loss target's steps are bounded by eq. 3 (see the constructor)
  std::vector<size_t> usable_;
  int n_ = 0;
  SearchMemo::Impl* memo_ = nullptr;  // problem.memo's, when given
  const SizeSetup* size_ = nullptr;   // this size's (the memo's, or own_size_)
  SizeSetup own_size_;
  std::vector<int> counts_;
  Candidate candidate_;
  PlanResult result_;
  // Scratch space for bounds.
  std::vector<double> a_, b_;
  std::vector<int> cap_, order_, idx_;
};

}  // namespace

void ParetoSet::Insert(const Candidate& c) {
  auto next = plans_.upper_bound(c.time_s);
  if (next != plans_.begin()) {
    auto prev = std::prev(next);
    if (prev->second.cost_usd <= c.cost_usd) {
      // As fast or faster and as cheap or cheaper: keep it, unless it is the same point and
      // `c` wins the tie-break.
      if (!(prev->first == c.time_s && prev->second.cost_usd == c.cost_usd &&
            Better(c, prev->second, Objective::kMinTime))) {
        return;
      }
    }
  }
  auto it = plans_.insert_or_assign(c.time_s, c).first;
  auto after = std::next(it);
  while (after != plans_.end() && after->second.cost_usd >= c.cost_usd) after = plans_.erase(after);
}

bool ParetoSet::Dominates(double time_s, double cost_usd) const {
  auto next = plans_.upper_bound(time_s);
  if (next == plans_.begin()) return false;
  return std::prev(next)->second.cost_usd <= cost_usd;
}

std::vector<Candidate> ParetoSet::Plans() const {
  std::vector<Candidate> out;
  out.reserve(plans_.size());
  for (const auto& [time, c] : plans_) out.push_back(c);
  return out;
}

PlanResult SolveExact(const PerformanceModel& model, const PlanProblem& problem) {
  const Mode mode = problem.objective == Objective::kMinTime ? Mode::kMinTime : Mode::kMinCost;
  BranchAndBound search(model, problem, mode, nullptr);
  const PlanResult seed = CheapestHomogeneous(model, problem);
  if (!seed.stopped.ok()) return seed;
  search.Seed(seed);
  PlanResult result = search.Run();
  result.evaluated += seed.evaluated;
  return result;
}

std::vector<Candidate> FrontierExact(const PerformanceModel& model, const PlanProblem& problem,
                                     uint64_t* evaluated, absl::Status* stopped) {
  ParetoSet front;
  BranchAndBound search(model, problem, Mode::kFrontier, &front);
  const PlanResult result = search.Run();
  if (evaluated != nullptr) *evaluated = result.evaluated;
  if (stopped != nullptr) *stopped = result.stopped;
  return front.Plans();
}

}  // namespace spotdnn::provisioner
