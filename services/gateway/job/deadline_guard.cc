#include "services/gateway/job/deadline_guard.h"

#include <algorithm>
#include <set>

namespace spotdnn::job {

absl::StatusOr<std::unique_ptr<DeadlineGuard>> DeadlineGuard::Create(const std::string& policy,
                                                                     GuardOptions options) {
  // Made once here so that an unknown name fails the job before it launches anything.
  auto made = provisioner::deadline::MakeDeadlinePolicy(policy);
  if (!made.ok()) return made.status();
  return std::unique_ptr<DeadlineGuard>(new DeadlineGuard(policy, options));
}

DeadlineGuard::TypeState& DeadlineGuard::StateOf(const std::string& type) {
  TypeState& st = types_[type];
  if (st.policy == nullptr) {
    // One policy object per type: a stateful policy keeps what it saw of that type's capacity.
    auto made = provisioner::deadline::MakeDeadlinePolicy(policy_);
    if (made.ok()) st.policy = *std::move(made);  // the name was checked at Create
  }
  return st;
}

void DeadlineGuard::OnSpotShort(const std::string& type, int wanted, int spot_running,
                                absl::Time at) {
  TypeState& st = StateOf(type);
  if (!st.fallback || st.backoff == absl::ZeroDuration()) {
    st.backoff = options_.probe_every;
  } else if (st.probing || st.spot_available < 0) {
    // A probe (or a launch after spot came back) was refused: wait longer before the next one.
    st.backoff = std::min(st.backoff * 2, options_.probe_max);
  }
  st.probing = false;
  st.fallback = true;
  st.wanted = std::max(wanted, 0);
  st.spot_available = std::max(spot_running, 0);
  st.next_probe = at + st.backoff;
  st.next_check = absl::InfinitePast();  // decide at the next tick
}

void DeadlineGuard::OnSpotLaunched(const std::string& type) {
  auto it = types_.find(type);
  if (it == types_.end()) return;
  it->second.spot_available = -1;
  it->second.probing = false;
  it->second.backoff = options_.probe_every;
  it->second.next_check = absl::InfinitePast();
}

bool DeadlineGuard::OnFallback() const {
  return std::any_of(types_.begin(), types_.end(),
                     [](const auto& entry) { return entry.second.fallback; });
}

int DeadlineGuard::Wanted(const std::string& type) const {
  auto it = types_.find(type);
  return it == types_.end() || !it->second.fallback ? 0 : it->second.wanted;
}

absl::Time DeadlineGuard::NextProbe(const std::string& type) const {
  auto it = types_.find(type);
  return it == types_.end() || !it->second.fallback ? absl::InfinitePast() : it->second.next_probe;
}

std::vector<GuardAction> DeadlineGuard::Tick(const GuardNow& now) {
  std::set<std::string> types;
  for (const auto& [type, unused] : now.types) types.insert(type);
  for (const auto& [type, st] : types_) {
    if (st.fallback) types.insert(type);
  }
  std::vector<GuardAction> actions;
  for (const std::string& type : types) {
    auto found = now.types.find(type);
    const GuardTypeNow here = found == now.types.end() ? GuardTypeNow{} : found->second;
    TypeState& st = StateOf(type);
    if (st.policy == nullptr) continue;
    GuardAction a{.instance_type = type};
    a.input = {.now_s = now.elapsed_s,
               .time_left_s = now.time_left_s,
               .work_left_s = now.work_left_s,
               .changeover_s = now.changeover_s,
               .spot_price_per_hour = here.spot_price_per_hour,
               .on_demand_price_per_hour = here.on_demand_price_per_hour,
               .running_spot = here.running_spot,
               .running_on_demand = here.running_on_demand};
    if (!st.fallback && here.running_on_demand > 0) {
      // On-demand instances run (a resumed gateway, a decision made when behind): the type is on
      // fallback until they go.
      st.fallback = true;
      st.wanted = here.running_spot + here.running_on_demand;
      st.backoff = options_.probe_every;
      st.next_probe = now.now;
    }
    if (!st.fallback) {
      // Spot covers the type: asked only when the job falls behind the plan's line, for
      // on-demand instances that would catch up.
      if (!now.behind || now.now < st.next_check) continue;
      st.next_check = now.now + options_.check_every;
      a.input.wanted = here.running_spot + here.running_on_demand;
      a.input.spot_available = -1;
      if (a.input.wanted == 0) continue;
      a.decision = st.policy->Decide(a.input);
      a.trigger = "behind-plan";
      a.launch_on_demand = std::max(0, a.decision.on_demand - here.running_on_demand);
      if (a.launch_on_demand > 0) {
        st.fallback = true;
        st.wanted = a.input.wanted;
        st.backoff = options_.probe_every;
      }
      // Only decisions that launch are logged here (one that keeps spot changes nothing).
      if (a.launch_on_demand > 0) {
        st.last_spot = a.decision.spot;
        st.last_on_demand = a.decision.on_demand;
        actions.push_back(std::move(a));
      }
      continue;
    }
    const bool probe =
        st.spot_available >= 0 && st.spot_available < st.wanted && now.now >= st.next_probe;
    if (!probe && now.now < st.next_check) continue;
    st.next_check = now.now + options_.check_every;
    a.probe = probe;
    a.trigger = probe ? "probe" : st.last_spot < 0 ? "capacity" : "check";
    a.input.wanted = st.wanted;
    a.input.spot_available = probe ? -1 : st.spot_available;
    a.decision = st.policy->Decide(a.input);
    a.launch_spot = std::max(0, a.decision.spot - here.running_spot);
    if (!probe && st.spot_available >= 0) {
      a.launch_spot = std::min(a.launch_spot, std::max(0, st.spot_available - here.running_spot));
    }
    a.launch_on_demand = std::max(0, a.decision.on_demand - here.running_on_demand);
    a.stop_on_demand = std::max(0, here.running_on_demand - a.decision.on_demand);
    // On-demand goes only where spot (running, or being launched) covers what is wanted: a policy
    // that would rather wait for spot is not followed into a gap with fewer workers (each restart
    // costs a changeover, and a policy that sees slack grow would stop and start on-demand again).
    const int covered =
        here.running_spot + a.launch_spot + here.running_on_demand - std::max(st.wanted, 0);
    a.stop_on_demand = std::min(a.stop_on_demand, std::max(0, covered));
    if (probe && a.launch_spot == 0) {
      st.next_probe = now.now + st.backoff;  // the policy keeps on-demand for now
      a.probe = false;
    }
    st.probing = a.probe;
    const bool acts = a.launch_spot > 0 || a.launch_on_demand > 0 || a.stop_on_demand > 0;
    if (acts || a.decision.spot != st.last_spot || a.decision.on_demand != st.last_on_demand) {
      st.last_spot = a.decision.spot;
      st.last_on_demand = a.decision.on_demand;
      actions.push_back(std::move(a));
    }
    // Back on spot for good: nothing on-demand runs and spot covers what is wanted.
    if (!acts && here.running_on_demand == 0 && here.running_spot >= st.wanted &&
        st.spot_available < 0) {
      st.fallback = false;
      st.last_spot = st.last_on_demand = -1;
    }
  }
  return actions;
}

}  // namespace spotdnn::job
