// spotdnn catalog hazards: each instance type's lifetime distribution, from a lifetime file or
// from the detectors' history of revocations, shown as survival probabilities and stored with
// the catalog (instance_types[].lifetimes) for `plan --confidence` and `simulate`.
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "provisioner/revocation_model.h"
#include "services/clients/service_clients.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/common/server.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/output.h"
#include "spotdnn/v1/detector.grpc.pb.h"

namespace spotdnn::gateway {
namespace {

std::string Pct(double p) { return absl::StrFormat("%.3f", p); }

// S(t) with its interval, "0.922 [0.83, 0.97]".
std::string SurvivalText(const provisioner::LifetimeDistribution& d, double t) {
  double lo = 0, hi = 0;
  d.SurvivalInterval(t, &lo, &hi);
  const double s = d.Survival(t);
  if (lo == hi) return Pct(s);
  return absl::StrFormat("%.3f [%.2f, %.2f]", s, lo, hi);
}

// The detectors' lifetimes, merged by instance (a replica that saw the notice wins), as one
// group per instance type.
absl::StatusOr<provisioner::LifetimeFile> DetectorLifetimes(const std::string& targets,
                                                            int* untyped) {
  std::map<std::string, pb::InstanceLifetime> by_instance;
  for (absl::string_view target : absl::StrSplit(targets, ',', absl::SkipEmpty())) {
    if (target.find(':') == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--from-detector = \"", targets, "\": expected HOST:PORT[,HOST:PORT...]"));
    }
    auto stub = pb::Detector::NewStub(services::MakeChannel(std::string(target)));
    auto listed = clients::DetectorClient(*stub).ListLifetimes();
    if (!listed.ok()) {
      return absl::Status(listed.status().code(), absl::StrCat("--from-detector ", target, ": ",
                                                               listed.status().message()));
    }
    for (const pb::InstanceLifetime& l : listed->lifetimes()) {
      const std::string key = absl::StrCat(l.instance_id(), "@", l.started_unix_ms() / 60000);
      auto [it, inserted] = by_instance.try_emplace(key, l);
      if (!inserted && (l.revoked() > it->second.revoked() ||
                        (l.revoked() == it->second.revoked() &&
                         l.ended_unix_ms() > it->second.ended_unix_ms()))) {
        it->second = l;
      }
    }
  }
  provisioner::LifetimeFile file;
  file.source = absl::StrCat("detector ", targets);
  std::map<std::string, provisioner::LifetimeGroup> groups;
  for (const auto& [key, l] : by_instance) {
    if (l.instance_type().empty()) {
      ++*untyped;
      continue;
    }
    provisioner::LifetimeGroup& g = groups[l.instance_type()];
    g.name = l.instance_type();
    g.observations.push_back(
        {.lifetime_s = std::max<int64_t>(0, l.ended_unix_ms() - l.started_unix_ms()) / 1000.0,
         .censored = !l.revoked()});
  }
  for (auto& [type, g] : groups) file.groups.push_back(std::move(g));
  file.rows_used = static_cast<int>(by_instance.size()) - *untyped;
  return file;
}

}  // namespace

int CatalogHazards(const Args& args, const Io& io) {
  const char* cmd = "catalog hazards";
  auto fail = [&](const absl::Status& s) { return ReportError(s, cmd, io); };
  auto name = args.Required("--catalog");
  if (!name.ok()) return fail(name.status());
  if (args.Has("--lifetimes") == args.Has("--from-detector")) {
    return fail(
        absl::InvalidArgumentError("give one of --lifetimes FILE and --from-detector HOST:PORT"));
  }
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  auto catalog = registry.ResolveCatalog(*name);
  if (!catalog.ok()) return fail(catalog.status());
  std::vector<provisioner::TypeRevocationInput> inputs;
  for (const pb::InstanceType& t : catalog->instance_types()) {
    provisioner::TypeRevocationInput in{
        .instance_type = t.name(),
        .gpu_type = t.gpu_type(),
        .interruption_rate_per_hour = t.interruption_rate_per_hour()};
    for (const pb::LifetimeObservation& o : t.lifetimes().observations()) {
      in.observations.push_back({.lifetime_s = o.lifetime_s(), .censored = o.censored()});
    }
    in.observations_source = t.lifetimes().source();
    inputs.push_back(std::move(in));
  }
  double censor_at = 24 * 3600.0;
  if (auto c = args.Get("--censor-at")) {
    if (!args.Has("--lifetimes")) {
      return fail(absl::InvalidArgumentError("--censor-at applies to --lifetimes FILE"));
    }
    if (*c == "none") {
      censor_at = std::numeric_limits<double>::infinity();
    } else {
      auto d = ParseDuration("--censor-at", *c);
      if (!d.ok()) return fail(d.status());
      censor_at = *d;
    }
  }
  std::map<std::string, std::string> mapping;
  if (auto m = args.Get("--map")) {
    for (absl::string_view pair : absl::StrSplit(*m, ',', absl::SkipEmpty())) {
      std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat("--map = \"", *m, "\": expected TYPE=SECTION[,TYPE=SECTION...]")));
      }
      mapping[kv[0]] = kv[1];
    }
  }
  provisioner::UnmatchedTypes unmatched = provisioner::UnmatchedTypes::kPooled;
  if (auto u = args.Get("--unmatched")) {
    if (*u == "never") {
      unmatched = provisioner::UnmatchedTypes::kNever;
    } else if (*u == "refuse") {
      unmatched = provisioner::UnmatchedTypes::kRefuse;
    } else if (*u != "pooled") {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("--unmatched = \"", *u, "\": expected pooled, never or refuse")));
    }
  }
  absl::StatusOr<provisioner::LifetimeFile> file;
  int untyped = 0;
  if (auto path = args.Get("--lifetimes")) {
    file = provisioner::ReadLifetimeCsv(*path, {.censor_at_s = censor_at});
  } else {
    file = DetectorLifetimes(*args.Get("--from-detector"), &untyped);
    if (file.ok() && file->groups.empty()) {
      return fail(absl::FailedPreconditionError(
          absl::StrCat("--from-detector ", *args.Get("--from-detector"),
                       ": no lifetimes with an instance type "
                       "yet (",
                       untyped,
                       " without one: registered by a gateway older than instance types, "
                       "or by an agent)")));
    }
  }
  if (!file.ok()) return fail(file.status());
  if (auto s = provisioner::ApplyLifetimeFile(*file, mapping, unmatched, inputs); !s.ok()) {
    return fail(s);
  }
  auto model = provisioner::BuildRevocationModel(inputs);
  if (!model.ok()) return fail(model.status());

  // The catalog with each type's lifetimes.
  for (int k = 0; k < catalog->instance_types_size(); ++k) {
    pb::InstanceType* t = catalog->mutable_instance_types(k);
    t->clear_lifetimes();
    if (inputs[k].observations.empty()) continue;
    t->mutable_lifetimes()->set_source(inputs[k].observations_source);
    for (const provisioner::LifetimeObservation& o : inputs[k].observations) {
      pb::LifetimeObservation* x = t->mutable_lifetimes()->add_observations();
      x->set_lifetime_s(o.lifetime_s);
      x->set_censored(o.censored);
    }
  }
  const std::string out_file = args.Get("--out").value_or("");
  if (!out_file.empty()) {
    std::ofstream f(out_file, std::ios::trunc);
    f << services::ToJson(*catalog, /*pretty=*/true) << "\n";
    if (!f) {
      return fail(absl::PermissionDeniedError(
          absl::StrCat("--out = \"", out_file, "\": cannot write the file")));
    }
  }
  const double hours[] = {1, 6, 24};
  if (io.json) {
    std::vector<std::string> types;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const provisioner::LifetimeDistribution& d = model->types[k];
      JsonObject survival, low, high;
      for (double h : hours) {
        double lo = 0, hi = 0;
        d.SurvivalInterval(h * 3600, &lo, &hi);
        const std::string key = absl::StrCat(h, "h");
        survival.Number(key, d.Survival(h * 3600));
        low.Number(key, lo);
        high.Number(key, hi);
      }
      const char* kind =
          d.kind() == provisioner::LifetimeDistribution::Kind::kKaplanMeier   ? "kaplan-meier"
          : d.kind() == provisioner::LifetimeDistribution::Kind::kExponential ? "exponential"
                                                                              : "never";
      types.push_back(JsonObject()
                          .String("instance_type", inputs[k].instance_type)
                          .String("gpu_type", inputs[k].gpu_type)
                          .String("model", kind)
                          .String("source", model->sources[k])
                          .Integer("lifetimes", d.observations())
                          .Integer("revocations", d.revocations())
                          .Number("rate_per_hour", d.rate_per_hour())
                          .Raw("survival", survival.str())
                          .Raw("survival_low", low.str())
                          .Raw("survival_high", high.str())
                          .str());
    }
    JsonObject o;
    o.String("catalog", catalog->name())
        .String("source", file->source)
        .Integer("rows_used", file->rows_used)
        .Integer("rows_skipped", file->rows_skipped)
        .Raw("types", "[" + absl::StrJoin(types, ",") + "]");
    if (!out_file.empty()) o.String("out", out_file);
    io.out << o.str() << "\n";
    return kExitOk;
  }
  io.out << "Revocation models for catalog " << catalog->name() << " from " << file->source << " ("
         << file->rows_used << " lifetimes";
  if (file->rows_skipped > 0) io.out << ", " << file->rows_skipped << " rows skipped";
  if (untyped > 0) io.out << ", " << untyped << " without an instance type left out";
  io.out << ")\n\n";
  Table table({"instance type", "GPU", "lifetimes", "revoked", "S(1h)", "S(6h)", "S(24h)", "rate/h",
               "model and source"});
  table.LeftAlign(1);
  table.LeftAlign(8);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const provisioner::LifetimeDistribution& d = model->types[k];
    table.AddRow({inputs[k].instance_type, inputs[k].gpu_type, absl::StrCat(d.observations()),
                  absl::StrCat(d.revocations()), SurvivalText(d, 3600), SurvivalText(d, 6 * 3600),
                  SurvivalText(d, 24 * 3600), absl::StrFormat("%.4f", d.rate_per_hour()),
                  model->sources[k]});
  }
  table.Print(io.out);
  io.out << "\nS(t): the probability that an instance lives past t (Kaplan-Meier, 95% intervals "
            "by Greenwood's formula; lifetimes that ended without a revocation are censored). "
            "rate/h: the exponential rate, or past the longest lifetime the average hazard "
            "the estimate goes on with.\n";
  for (size_t i = 0; i < file->problems.size() && i < 5; ++i) {
    io.out << "skipped " << file->problems[i] << "\n";
  }
  io.out << (out_file.empty() ? "Not saved (give --out FILE to write the catalog with them).\n"
                              : absl::StrCat("Catalog with lifetimes written to ", out_file, "\n"));
  return kExitOk;
}

}  // namespace spotdnn::gateway
