#include "services/provisioner/zone_plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/common/convert.h"

namespace spotdnn::services {
namespace {

using provisioner::Placement;

// What decides a placement's plan: its types and their prices (its zone's name does not), so
// places with the same key are planned once.
std::string PlanKey(const Placement& p) {
  std::string key;
  for (size_t i = 0; i < p.source_types.size(); ++i) {
    absl::StrAppendFormat(&key, "%d:%a:%a;", p.source_types[i],
                          p.catalog.types[i].spot_price_per_hour,
                          p.catalog.types[i].on_demand_price_per_hour);
  }
  return key;
}

// The request for one placement: its catalog inline, and the quota overrides of types it does
// not offer dropped (a type the catalog does not list at all stays, for the planner to refuse).
// A running instance (options.existing) of a type not offered there rules the place out.
std::optional<pb::PlanRequest> RequestIn(const pb::PlanRequest& request,
                                         const pb::InstanceCatalog& catalog, const Placement& p,
                                         std::string* why_not) {
  std::set<std::string> listed, offered;
  for (const pb::InstanceType& t : catalog.instance_types()) listed.insert(t.name());
  for (const predictor::InstanceType& t : p.catalog.types) offered.insert(t.name);
  for (const pb::InstanceCount& c : request.options().existing().instances()) {
    if (c.count() > 0 && listed.count(c.instance_type()) > 0 &&
        offered.count(c.instance_type()) == 0) {
      *why_not =
          absl::StrCat(c.instance_type(), " (running, options.existing) is not offered here");
      return std::nullopt;
    }
  }
  pb::PlanRequest out = request;
  *out.mutable_catalog()->mutable_catalog() = EffectiveCatalog(catalog, p);
  auto* quotas = out.mutable_options()->mutable_quota_overrides();
  quotas->erase(std::remove_if(quotas->begin(), quotas->end(),
                               [&](const pb::InstanceCount& q) {
                                 return listed.count(q.instance_type()) > 0 &&
                                        offered.count(q.instance_type()) == 0;
                               }),
                quotas->end());
  return out;
}

// Where a plan of placement `p` runs: its zone, region and each of its cluster's types' zone.
void Stamp(const Placement& p, pb::Plan* plan) {
  plan->set_zone(p.zone);
  plan->set_region(p.region);
  plan->clear_zones();
  for (const pb::InstanceCount& c : plan->cluster().instances()) {
    if (c.count() <= 0) continue;
    for (size_t i = 0; i < p.catalog.types.size(); ++i) {
      if (p.catalog.types[i].name == c.instance_type()) {
        plan->add_zones(absl::StrCat(c.instance_type(), "=", p.type_zones[i]));
      }
    }
  }
}

void StampAll(const Placement& p, pb::PlanResponse* r) {
  Stamp(p, r->mutable_plan());
  if (r->has_spotdnn_baseline()) Stamp(p, r->mutable_spotdnn_baseline());
  if (r->has_homogeneous_baseline()) Stamp(p, r->mutable_homogeneous_baseline());
  if (r->has_plain_plan()) Stamp(p, r->mutable_plain_plan());
  if (r->has_most_reliable()) Stamp(p, r->mutable_most_reliable());
}

bool Refusal(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument ||
         s.code() == absl::StatusCode::kFailedPrecondition;
}

}  // namespace

provisioner::ZonedCatalog ZonedCatalogOf(const pb::InstanceCatalog& catalog) {
  provisioner::ZonedCatalog out{.catalog = ToDomain(catalog)};
  for (const pb::InstanceType& t : catalog.instance_types()) {
    std::vector<provisioner::TypeZone>& zones = out.zones.emplace_back();
    for (const pb::InstanceZone& z : t.zones()) {
      zones.push_back({.name = z.name(),
                       .region = z.region(),
                       .spot_price_per_hour = z.spot_price_per_hour(),
                       .on_demand_price_per_hour = z.on_demand_price_per_hour()});
    }
  }
  return out;
}

provisioner::ZoneRequest ZoneRequestOf(const pb::PlanOptions& options) {
  return {.zone = options.zone(),
          .region = options.region(),
          .avoid_zones = {options.avoid_zones().begin(), options.avoid_zones().end()},
          .zones_without_capacity = {options.zones_without_capacity().begin(),
                                     options.zones_without_capacity().end()}};
}

pb::InstanceCatalog EffectiveCatalog(const pb::InstanceCatalog& catalog, const Placement& p) {
  pb::InstanceCatalog out = catalog;
  out.clear_instance_types();
  if (!p.region.empty()) out.set_region(p.region);
  for (size_t i = 0; i < p.source_types.size(); ++i) {
    pb::InstanceType* t = out.add_instance_types();
    *t = catalog.instance_types(p.source_types[i]);
    t->clear_zones();
    t->set_spot_price_per_hour(p.catalog.types[i].spot_price_per_hour);
    t->set_on_demand_price_per_hour(p.catalog.types[i].on_demand_price_per_hour);
  }
  return out;
}

absl::Status PlanAcrossZones(const pb::PlanRequest& request, const pb::InstanceCatalog& catalog,
                             bool synchronous, const PlanOne& plan, pb::PlanResponse* response) {
  auto placed =
      provisioner::PlaceJob(ZonedCatalogOf(catalog), ZoneRequestOf(request.options()), synchronous);
  if (!placed.ok()) return placed.status();
  if (!placed->zoned) return plan(request, response);
  const bool budget = request.mode() == pb::PLAN_MODE_BUDGET;
  struct Considered {
    const Placement* place;
    std::optional<pb::PlanResponse> answer;
    std::string why_not;
  };
  std::vector<Considered> considered;
  std::map<std::string, pb::PlanResponse> planned;  // by PlanKey
  absl::Status first_refusal;
  for (const Placement& p : placed->candidates) {
    Considered c{.place = &p};
    const std::string key = PlanKey(p);
    if (auto it = planned.find(key); it != planned.end()) {
      c.answer = it->second;
    } else if (auto one = RequestIn(request, catalog, p, &c.why_not)) {
      pb::PlanResponse r;
      if (absl::Status s = plan(*one, &r); s.ok()) {
        planned.emplace(key, r);
        c.answer = std::move(r);
      } else if (Refusal(s)) {
        if (first_refusal.ok()) first_refusal = s;
        c.why_not = absl::StrCat("cannot plan: ", s.message());
      } else {
        return s;
      }
    }
    if (c.answer) StampAll(p, &*c.answer);
    considered.push_back(std::move(c));
  }
  auto objective = [&](const pb::Plan& p) { return budget ? p.time_s() : p.cost_usd(); };
  // The best feasible answer, else the first answer; the first listed wins a tie.
  const Considered* best = nullptr;
  for (const Considered& c : considered) {
    if (!c.answer) continue;
    const bool feasible = c.answer->plan().feasible();
    if (best == nullptr ||
        (feasible && (!best->answer->plan().feasible() ||
                      objective(c.answer->plan()) < objective(best->answer->plan())))) {
      best = &c;
    }
  }
  if (best == nullptr) {
    return first_refusal.ok()
               ? absl::InvalidArgumentError(considered.empty() ? "no zone to plan in"
                                                               : considered[0].why_not)
               : first_refusal;
  }
  *response = *best->answer;
  // Feasible places by the objective, then the others in the catalog's order, then the ones left
  // out before planning.
  std::vector<const Considered*> order;
  for (const Considered& c : considered) order.push_back(&c);
  auto feasible = [](const Considered* c) { return c->answer && c->answer->plan().feasible(); };
  std::stable_sort(order.begin(), order.end(), [&](const Considered* a, const Considered* b) {
    if (feasible(a) != feasible(b)) return feasible(a);
    return feasible(a) && objective(a->answer->plan()) < objective(b->answer->plan());
  });
  pb::Plan& chosen = *response->mutable_plan();
  for (const Considered* c : order) {
    std::string text;
    if (feasible(c)) {
      const pb::Plan& p = c->answer->plan();
      text = absl::StrFormat("$%.4f in %.1f h", p.cost_usd(), p.time_s() / 3600);
    } else if (c->answer) {
      text = "no plan meets the SLO";
    } else {
      text = c->why_not;
    }
    chosen.add_zones_considered(absl::StrCat(c->place->name(), ": ", text));
  }
  for (const std::string& l : placed->left_out) chosen.add_zones_considered(l);
  return absl::OkStatus();
}

}  // namespace spotdnn::services
