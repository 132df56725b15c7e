#include "services/gateway/job/job_spec.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"
#include "provisioner/deadline/deadline_policy.h"
#include "provisioner/launcher/s3_client.h"
#include "services/common/convert.h"
#include "services/common/values.h"

namespace spotdnn::job {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& field, const json& value, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " = ", value.dump(), ": ", why));
}

// Fields a JSON object may hold; anything else is a typo worth an error.
absl::Status OnlyKnown(const json& object, const std::string& where,
                       const std::set<std::string>& known) {
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) == 0) {
      std::string list;
      for (const std::string& k : known) absl::StrAppend(&list, list.empty() ? "" : ", ", k);
      return absl::InvalidArgumentError(
          absl::StrCat(where, key, ": unknown field (known: ", list, ")"));
    }
  }
  return absl::OkStatus();
}

// {"TYPE": N, ...} with each N a whole number from 0 to 1000 (quotas, a local capacity). int64:
// a value beyond int's range must be refused, not truncated into it.
absl::StatusOr<std::map<std::string, int>> CountsPerType(const json& value,
                                                         const std::string& field) {
  if (!value.is_object()) return Bad(field, value, "expected {\"TYPE\": N, ...}");
  std::map<std::string, int> counts;
  for (const auto& [type, n] : value.items()) {
    if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > 1000) {
      return Bad(field + "." + type, n, "expected an integer from 0 to 1000");
    }
    counts[type] = n.get<int>();
  }
  return counts;
}

absl::StatusOr<std::string> String(const json& object, const std::string& key,
                                   const std::string& field, bool required) {
  if (!object.contains(key)) {
    if (required) return absl::InvalidArgumentError(absl::StrCat(field, " is required"));
    return std::string();
  }
  const json& v = object.at(key);
  if (!v.is_string() || (required && v.get<std::string>().empty())) {
    return Bad(field, v, "expected a non-empty string");
  }
  return v.get<std::string>();
}

// A number of seconds, or a duration string ("30m", "1.5h", "2400s").
absl::StatusOr<double> Seconds(const json& v, const std::string& field) {
  if (v.is_number()) {
    if (v.get<double>() < 0) return Bad(field, v, "must not be negative");
    return v.get<double>();
  }
  if (v.is_string()) return services::ParseDuration(field, v.get<std::string>());
  return Bad(field, v, "expected seconds or a duration such as \"30m\"");
}

absl::StatusOr<double> Number(const json& v, const std::string& field, double min) {
  if (!v.is_number()) return Bad(field, v, "expected a number");
  if (v.get<double>() < min) return Bad(field, v, absl::StrCat("must be >= ", min));
  return v.get<double>();
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

// slo.target (or slo.accuracy, as {"accuracy": A}): "METRIC>=V" / "METRIC<=V", {"accuracy": A},
// {"loss": L}, or {"metric": M, "direction": "at-least"|"at-most", "value": V}.
absl::StatusOr<v1::MetricTarget> MetricTargetOf(const json& v, const std::string& field) {
  if (v.is_string()) return services::ParseMetricTarget(field, v.get<std::string>());
  const char* expected =
      "expected \"METRIC>=V\" or \"METRIC<=V\", {\"accuracy\": A}, {\"loss\": L} or "
      "{\"metric\": M, \"direction\": \"at-least\"|\"at-most\", \"value\": V}";
  if (!v.is_object()) return Bad(field, v, expected);
  if (v.size() == 1 && (v.contains("accuracy") || v.contains("loss"))) {
    const bool accuracy = v.contains("accuracy");
    const json& value = accuracy ? v["accuracy"] : v["loss"];
    const std::string name = accuracy ? "accuracy" : "loss";
    if (!value.is_number())
      return Bad(field == "slo.accuracy" ? field : field + "." + name, value, "expected a number");
    return services::ParseMetricTarget(
        field,
        absl::StrCat(name, accuracy ? ">=" : "<=", absl::StrFormat("%.17g", value.get<double>())));
  }
  if (auto s = OnlyKnown(v, field + ".", {"metric", "direction", "value"}); !s.ok()) return s;
  if (!v.contains("metric") || !v.contains("direction") || !v.contains("value")) {
    return Bad(field, v, expected);
  }
  if (!v["metric"].is_string()) return Bad(field + ".metric", v["metric"], "expected a name");
  if (!v["value"].is_number()) return Bad(field + ".value", v["value"], "expected a number");
  const json& direction = v["direction"];
  if (!direction.is_string() || (direction != "at-least" && direction != "at-most" &&
                                 direction != ">=" && direction != "<=")) {
    return Bad(field + ".direction", direction, "expected \"at-least\" or \"at-most\"");
  }
  const bool at_least = direction == "at-least" || direction == ">=";
  return services::ParseMetricTarget(
      field, absl::StrCat(v["metric"].get<std::string>(), at_least ? ">=" : "<=",
                          absl::StrFormat("%.17g", v["value"].get<double>())));
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("job spec: not valid JSON");
  if (!doc.is_object()) return absl::InvalidArgumentError("job spec: expected a JSON object");
  if (auto s = OnlyKnown(
          doc, "",
          {"name", "workload", "slo", "catalog", "provider", "quotas", "parameter_servers",
           "commands", "strategy", "revocation_overhead", "checkpoints", "fallback",
           "deadline_policy", "sync", "global_batch", "elastic", "zones"});
      !s.ok()) {
    return s;
  }
  JobSpec spec;
  if (doc.contains("zones")) {
    const json& z = doc["zones"];
    if (!z.is_object()) {
      return Bad("zones", z, "expected {\"zone\", \"region\", \"avoid\", \"checkpoint_mb\"}");
    }
    if (auto s = OnlyKnown(z, "zones.", {"zone", "region", "avoid", "checkpoint_mb"}); !s.ok()) {
      return s;
    }
    for (const auto& [key, target] :
         {std::pair{"zone", &spec.zones.zone}, std::pair{"region", &spec.zones.region}}) {
      if (!z.contains(key)) continue;
      auto value = String(z, key, absl::StrCat("zones.", key), true);
      if (!value.ok()) return value.status();
      *target = *value;
    }
    if (z.contains("avoid")) {
      const json& avoid = z["avoid"];
      if (!avoid.is_array()) return Bad("zones.avoid", avoid, "expected a list of zone names");
      for (size_t i = 0; i < avoid.size(); ++i) {
        if (!avoid[i].is_string() || avoid[i].get<std::string>().empty()) {
          return Bad(absl::StrCat("zones.avoid[", i, "]"), avoid[i], "expected a zone name");
        }
        spec.zones.avoid.push_back(avoid[i].get<std::string>());
      }
      if (!spec.zones.zone.empty() && std::find(spec.zones.avoid.begin(), spec.zones.avoid.end(),
                                                spec.zones.zone) != spec.zones.avoid.end()) {
        return Bad("zones.zone", z["zone"], "is also in zones.avoid");
      }
    }
    if (z.contains("checkpoint_mb")) {
      const json& mb = z["checkpoint_mb"];
      if (!mb.is_number() || !(mb.get<double>() >= 0) || !std::isfinite(mb.get<double>())) {
        return Bad("zones.checkpoint_mb", mb, "expected the checkpoint's size in MB, >= 0");
      }
      spec.zones.checkpoint_mb = mb.get<double>();
    }
  }
  auto name = String(doc, "name", "name", true);
  if (!name.ok()) return name.status();
  if (!ValidName(*name)) return Bad("name", doc["name"], "use 1-64 of A-Z a-z 0-9 . _ -");
  spec.name = *name;

  if (!doc.contains("workload")) return absl::InvalidArgumentError("workload is required");
  const json& workload = doc["workload"];
  if (workload.is_string()) {
    spec.workload = workload.get<std::string>();
  } else if (workload.is_object()) {
    if (auto s = OnlyKnown(workload, "workload.", {"profile", "file", "profiling"}); !s.ok()) {
      return s;
    }
    auto profile = String(workload, "profile", "workload.profile", false);
    auto file = String(workload, "file", "workload.file", false);
    if (!profile.ok()) return profile.status();
    if (!file.ok()) return file.status();
    if (profile->empty() == file->empty()) {
      return absl::InvalidArgumentError(
          "workload: give exactly one of \"profile\" (a name) and \"file\" (a JSON profile)");
    }
    spec.workload = profile->empty() ? *file : *profile;
    if (workload.contains("profiling")) {
      const json& profiling = workload["profiling"];
      if (!profiling.is_object()) return Bad("workload.profiling", profiling, "expected an object");
      if (auto s =
              OnlyKnown(profiling, "workload.profiling.", {"logs", "runs", "base", "ps_bandwidth"});
          !s.ok()) {
        return s;
      }
      if (profile->empty()) {
        return absl::InvalidArgumentError(
            "workload.profiling needs workload.profile: the name to store the fitted profile "
            "under");
      }
      const json& logs = profiling.value("logs", json::array());
      const json& runs = profiling.value("runs", json::array());
      if (!logs.is_array()) return Bad("workload.profiling.logs", logs, "expected a list");
      if (!runs.is_array()) return Bad("workload.profiling.runs", runs, "expected a list");
      if (logs.empty() && runs.empty()) {
        return absl::InvalidArgumentError(
            "workload.profiling: give \"logs\" (files of earlier runs) or \"runs\" (short runs "
            "to make now), or both");
      }
      for (size_t i = 0; i < logs.size(); ++i) {
        if (!logs[i].is_string() || logs[i].get<std::string>().empty()) {
          return Bad(absl::StrCat("workload.profiling.logs[", i, "]"), logs[i],
                     "expected a file path");
        }
        spec.profiling_logs.push_back(logs[i]);
      }
      for (size_t i = 0; i < runs.size(); ++i) {
        const std::string field = absl::StrCat("workload.profiling.runs[", i, "]");
        const json& run = runs[i];
        if (!run.is_object()) return Bad(field, run, "expected {\"cluster\": {...}, \"steps\": N}");
        if (auto s = OnlyKnown(run, field + ".", {"cluster", "steps"}); !s.ok()) return s;
        if (!run.contains("cluster"))
          return absl::InvalidArgumentError(field + ".cluster is required");
        auto cluster = CountsPerType(run["cluster"], field + ".cluster");
        if (!cluster.ok()) return cluster.status();
        int workers = 0;
        for (const auto& [type, n] : *cluster) workers += n;
        if (workers == 0)
          return Bad(field + ".cluster", run["cluster"], "needs at least one worker");
        const json& steps = run.value("steps", json());
        if (!steps.is_number_integer() || steps.get<int64_t>() < 1 ||
            steps.get<int64_t>() > 1'000'000) {
          return Bad(field + ".steps", steps, "expected an integer from 1 to 1000000");
        }
        spec.profiling_runs.push_back(
            {.cluster = *std::move(cluster), .steps = steps.get<int64_t>()});
      }
      if (profiling.contains("ps_bandwidth")) {
        auto bandwidth = Number(profiling["ps_bandwidth"], "workload.profiling.ps_bandwidth", 0);
        if (!bandwidth.ok()) return bandwidth.status();
        spec.profiling_ps_bandwidth = *bandwidth;
      }
      auto base = String(profiling, "base", "workload.profiling.base", false);
      if (!base.ok()) return base.status();
      spec.profiling_base = *base;
    }
  } else {
    return Bad("workload", workload, "expected a profile name or {\"profile\"|\"file\": ...}");
  }

  if (!doc.contains("slo") || !doc["slo"].is_object()) {
    return absl::InvalidArgumentError(
        "slo is required: {\"loss\": L, \"deadline\": \"30m\"} (and/or \"budget_usd\")");
  }
  const json& slo = doc["slo"];
  if (auto s = OnlyKnown(
          slo, "slo.",
          {"loss", "accuracy", "target", "iterations", "epochs", "dataset_size", "deadline",
           "budget_usd", "confidence", "lifetimes", "notice", "takeover_delay"});
      !s.ok()) {
    return s;
  }
  // The target: a loss, an accuracy, a metric's value ("target"), a number of global
  // iterations, or epochs of a dataset.
  const int targets = slo.contains("loss") + slo.contains("accuracy") + slo.contains("target") +
                      slo.contains("iterations") + slo.contains("epochs");
  if (targets == 0) {
    return absl::InvalidArgumentError(
        "slo.loss is required (or slo.iterations, or slo.epochs with slo.dataset_size, or "
        "slo.accuracy, or slo.target \"METRIC>=V\")");
  }
  if (targets > 1) {
    return absl::InvalidArgumentError(
        "slo: give one target of loss, accuracy, target, iterations and epochs, not several");
  }
  if (slo.contains("dataset_size") && !slo.contains("epochs")) {
    return Bad("slo.dataset_size", slo["dataset_size"], "only with slo.epochs");
  }
  if (slo.contains("accuracy") || slo.contains("target")) {
    auto target = MetricTargetOf(
        slo.contains("accuracy") ? json{{"accuracy", slo["accuracy"]}} : slo["target"],
        slo.contains("accuracy") ? "slo.accuracy" : "slo.target");
    if (!target.ok()) return target.status();
    if (target->metric() == "loss") {
      spec.target_loss = target->value();
    } else {
      spec.target_metric = *std::move(target);
    }
  } else if (slo.contains("loss")) {
    auto loss = Number(slo["loss"], "slo.loss", 0);
    if (!loss.ok()) return loss.status();
    if (*loss <= 0) return Bad("slo.loss", slo["loss"], "must be > 0");
    spec.target_loss = *loss;
  } else if (slo.contains("iterations")) {
    const json& n = slo["iterations"];
    if (!n.is_number_integer() || n.get<int64_t>() < 1) {
      return Bad("slo.iterations", n, "expected a whole number of global iterations >= 1");
    }
    spec.target_iterations = static_cast<double>(n.get<int64_t>());
  } else {
    auto epochs = Number(slo["epochs"], "slo.epochs", 0);
    if (!epochs.ok()) return epochs.status();
    if (*epochs <= 0) return Bad("slo.epochs", slo["epochs"], "must be > 0");
    if (!slo.contains("dataset_size")) {
      return absl::InvalidArgumentError(
          "slo.dataset_size is required with slo.epochs: the samples in one epoch");
    }
    const json& size = slo["dataset_size"];
    if (!size.is_number_integer() || size.get<int64_t>() < 1) {
      return Bad("slo.dataset_size", size, "expected a whole number of samples >= 1");
    }
    spec.target_epochs = *epochs;
    spec.dataset_size = static_cast<double>(size.get<int64_t>());
  }
  if (slo.contains("deadline")) {
    auto d = Seconds(slo["deadline"], "slo.deadline");
    if (!d.ok()) return d.status();
    if (*d <= 0) return Bad("slo.deadline", slo["deadline"], "must be > 0");
    spec.deadline_s = *d;
  }
  if (slo.contains("budget_usd")) {
    auto b = Number(slo["budget_usd"], "slo.budget_usd", 0);
    if (!b.ok()) return b.status();
    if (*b <= 0) return Bad("slo.budget_usd", slo["budget_usd"], "must be > 0");
    spec.budget_usd = *b;
  }
  if (spec.deadline_s == 0 && spec.budget_usd == 0) {
    return absl::InvalidArgumentError("slo: give a deadline, a budget_usd, or both");
  }
  if (slo.contains("confidence")) {
    const json& q = slo["confidence"];
    if (!q.is_number() || !(q.get<double>() > 0 && q.get<double>() < 1)) {
      return Bad("slo.confidence", q, "expected a probability strictly between 0 and 1");
    }
    if (spec.deadline_s == 0) {
      return Bad("slo.confidence", q, "needs slo.deadline: the probability is of meeting it");
    }
    spec.confidence = q.get<double>();
  }
  for (const char* key : {"lifetimes", "notice", "takeover_delay"}) {
    if (slo.contains(key) && spec.confidence == 0) {
      return Bad(absl::StrCat("slo.", key), slo[key], "applies with slo.confidence");
    }
  }
  if (slo.contains("lifetimes")) {
    auto path = String(slo, "lifetimes", "slo.lifetimes", true);
    if (!path.ok()) return path.status();
    spec.lifetimes = *path;
  }
  if (slo.contains("notice")) {
    auto d = Seconds(slo["notice"], "slo.notice");
    if (!d.ok()) return d.status();
    spec.notice_s = *d;
  }
  if (slo.contains("takeover_delay")) {
    auto d = Seconds(slo["takeover_delay"], "slo.takeover_delay");
    if (!d.ok()) return d.status();
    spec.takeover_delay_s = *d;
  }

  auto catalog = String(doc, "catalog", "catalog", true);
  if (!catalog.ok()) return catalog.status();
  spec.catalog = *catalog;

  if (doc.contains("strategy")) {
    auto strategy = String(doc, "strategy", "strategy", true);
    if (!strategy.ok()) return strategy.status();
    auto parsed = services::ParseEnumLabel<spotdnn::v1::PlanStrategy>("strategy", *strategy);
    if (!parsed.ok() || *parsed == spotdnn::v1::PLAN_STRATEGY_HOMOGENEOUS) {
      return Bad("strategy", doc["strategy"], "expected exact, spotdnn or exhaustive");
    }
    spec.strategy = *parsed;
  }

  if (doc.contains("provider")) {
    const json& provider = doc["provider"];
    if (provider.is_string()) {
      spec.provider.name = provider.get<std::string>();
    } else if (provider.is_object()) {
      auto pname = String(provider, "name", "provider.name", true);
      if (!pname.ok()) return pname.status();
      spec.provider.name = *pname;
      for (const auto& [key, value] : provider.items()) {
        if (key == "name") continue;
        if (key == "capacity") {
          auto capacity = CountsPerType(value, "provider.capacity");
          if (!capacity.ok()) return capacity.status();
          spec.provider.capacity = *std::move(capacity);
          continue;
        }
        if (key == "capacity_trace") {
          if (!value.is_object()) {
            return Bad("provider.capacity_trace", value, "expected {\"TYPE\": \"FILE\", ...}");
          }
          for (const auto& [type, file] : value.items()) {
            if (!file.is_string() || file.get<std::string>().empty()) {
              return Bad("provider.capacity_trace." + type, file, "expected a trace file");
            }
            spec.provider.capacity_trace[type] = file.get<std::string>();
          }
          continue;
        }
        if (key == "capacity_trace_time_scale") {
          if (!value.is_number() || !(value.get<double>() > 0)) {
            return Bad("provider.capacity_trace_time_scale", value,
                       "expected trace seconds per real second > 0 (3600: an hour a second)");
          }
          spec.provider.capacity_trace_time_scale = value.get<double>();
          continue;
        }
        if (value.is_string()) {
          spec.provider.options[key] = value.get<std::string>();
        } else if (value.is_boolean()) {  // e.g. placement_scores, external_ip
          spec.provider.options[key] = value.get<bool>() ? "true" : "false";
        } else if (value.is_array()) {  // e.g. security_group_ids
          std::string joined;
          for (const json& v : value) {
            if (!v.is_string()) return Bad("provider." + key, value, "expected strings");
            absl::StrAppend(&joined, joined.empty() ? "" : ",", v.get<std::string>());
          }
          spec.provider.options[key] = joined;
        } else {
          return Bad("provider." + key, value,
                     "expected a string, true or false, or a list of strings");
        }
      }
    } else {
      return Bad("provider", provider, "expected a provider name or {\"name\": ...}");
    }
    if (absl::Status s = launcher::ValidateProviderSpec(spec.provider); !s.ok()) return s;
  }

  if (doc.contains("quotas")) {
    auto quotas = CountsPerType(doc["quotas"], "quotas");
    if (!quotas.ok()) return quotas.status();
    spec.quotas = *std::move(quotas);
  }
  if (doc.contains("parameter_servers")) {
    const json& ps = doc["parameter_servers"];
    if (!ps.is_number_integer() || ps.get<int64_t>() < 1 || ps.get<int64_t>() > 64) {
      return Bad("parameter_servers", ps, "expected an integer from 1 to 64");
    }
    spec.parameter_servers = ps.get<int>();
  }
  if (doc.contains("fallback")) {
    auto fallback = String(doc, "fallback", "fallback", true);
    if (!fallback.ok()) return fallback.status();
    if (*fallback != "on-demand" && *fallback != "none") {
      return Bad("fallback", doc["fallback"], "expected on-demand or none");
    }
    spec.fallback = *fallback;
  }
  if (doc.contains("deadline_policy")) {
    auto policy = String(doc, "deadline_policy", "deadline_policy", true);
    if (!policy.ok()) return policy.status();
    if (auto made = provisioner::deadline::MakeDeadlinePolicy(*policy); !made.ok()) {
      return Bad("deadline_policy", doc["deadline_policy"], std::string(made.status().message()));
    }
    spec.deadline_policy = *policy;
  }
  if (doc.contains("revocation_overhead")) {
    auto d = Seconds(doc["revocation_overhead"], "revocation_overhead");
    if (!d.ok()) return d.status();
    spec.revocation_overhead_s = *d;
  }

  if (doc.contains("checkpoints")) {
    auto uri = String(doc, "checkpoints", "checkpoints", true);
    if (!uri.ok()) return uri.status();
    if (!absl::StartsWith(*uri, "s3://") || uri->size() <= 5) {
      return Bad("checkpoints", doc["checkpoints"],
                 "expected an s3://BUCKET/PREFIX URI (the local provider keeps them in "
                 "DATA_DIR/checkpoints by itself)");
    }
    // The one placeholder is {region}; with it, the URI must still be one once filled in.
    const std::string filled = absl::StrReplaceAll(*uri, {{"{region}", "us-east-1"}});
    if (filled.find_first_of("{}") != std::string::npos) {
      return Bad("checkpoints", doc["checkpoints"],
                 "the only placeholder is {region} (a bucket or prefix per region)");
    }
    if (auto parsed = launcher::ParseS3Uri("checkpoints", filled); !parsed.ok()) {
      return Bad("checkpoints", doc["checkpoints"],
                 "expected an s3://BUCKET/PREFIX URI with a valid bucket name (3-63 of a-z 0-9 . "
                 "-, {region} filled in)");
    }
    spec.checkpoint_uri = *uri;
  }

  if (doc.contains("sync")) {
    auto sync = String(doc, "sync", "sync", true);
    if (!sync.ok()) return sync.status();
    if (*sync != "allreduce" && *sync != "ps") {
      return Bad("sync", doc["sync"],
                 "expected \"allreduce\" (synchronous, a torchrun script) or \"ps\" "
                 "(parameter servers)");
    }
    spec.sync = *sync;
  }
  if (doc.contains("global_batch")) {
    const json& b = doc["global_batch"];
    if (!b.is_number_integer() || b.get<int64_t>() < 1 || b.get<int64_t>() > 1'000'000'000) {
      return Bad("global_batch", b, "expected a whole number of samples per step >= 1");
    }
    if (spec.sync == "ps") return Bad("global_batch", b, "applies to a synchronous job");
    spec.global_batch = b.get<int>();
  }
  if (doc.contains("elastic")) {
    const json& e = doc["elastic"];
    if (!e.is_object()) return Bad("elastic", e, "expected an object");
    if (auto s = OnlyKnown(
            e, "elastic.",
            {"min_instances", "max_restarts", "join_timeout", "rendezvous", "check_script"});
        !s.ok()) {
      return s;
    }
    spec.has_elastic = true;
    if (e.contains("min_instances")) {
      const json& n = e["min_instances"];
      if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > 1000) {
        return Bad("elastic.min_instances", n, "expected an integer from 1 to 1000");
      }
      spec.elastic.min_instances = n.get<int>();
    }
    if (e.contains("max_restarts")) {
      const json& n = e["max_restarts"];
      if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > 1000) {
        return Bad("elastic.max_restarts", n, "expected an integer from 0 to 1000");
      }
      spec.elastic.max_restarts = n.get<int>();
    }
    if (e.contains("check_script")) {
      if (!e["check_script"].is_boolean()) {
        return Bad("elastic.check_script", e["check_script"], "expected true or false");
      }
      spec.elastic.check_script = e["check_script"].get<bool>();
    }
    if (e.contains("join_timeout")) {
      auto d = Seconds(e["join_timeout"], "elastic.join_timeout");
      if (!d.ok()) return d.status();
      if (*d < 1) return Bad("elastic.join_timeout", e["join_timeout"], "must be at least 1 s");
      spec.elastic.join_timeout_s = *d;
    }
    if (e.contains("rendezvous")) {
      const json& r = e["rendezvous"];
      if (!r.is_object()) {
        return Bad("elastic.rendezvous", r, "expected {\"host\": H, \"port\": P}");
      }
      if (auto s = OnlyKnown(r, "elastic.rendezvous.", {"host", "port"}); !s.ok()) return s;
      auto host = String(r, "host", "elastic.rendezvous.host", false);
      if (!host.ok()) return host.status();
      spec.elastic.host = *host;
      if (r.contains("port")) {
        const json& p = r["port"];
        if (!p.is_number_integer() || p.get<int64_t>() < 0 || p.get<int64_t>() > 65535) {
          return Bad("elastic.rendezvous.port", p, "expected a port from 1 to 65535 (0: any)");
        }
        spec.elastic.port = p.get<int>();
      }
    }
  }
  spec.has_parameter_servers = doc.contains("parameter_servers");

  if (!doc.contains("commands") || !doc["commands"].is_object()) {
    return absl::InvalidArgumentError(
        "commands is required: {\"worker\": \"...\", \"parameter_server\": \"...\"}");
  }
  const json& commands = doc["commands"];
  if (auto s = OnlyKnown(commands, "commands.", {"worker", "parameter_server"}); !s.ok()) return s;
  auto worker = String(commands, "worker", "commands.worker", true);
  if (!worker.ok()) return worker.status();
  spec.worker_command = *worker;
  auto ps = String(commands, "parameter_server", "commands.parameter_server", false);
  if (!ps.ok()) return ps.status();
  spec.ps_command = ps->empty() ? spec.worker_command : *ps;
  spec.has_ps_command = commands.contains("parameter_server");
  if (!spec.sync.empty()) {
    auto checked = ResolveSync(spec, v1::SYNC_KIND_UNSPECIFIED);
    if (!checked.ok()) return checked.status();
  }
  return spec;
}

absl::StatusOr<v1::SyncKind> ResolveSync(const JobSpec& spec, v1::SyncKind profile_sync) {
  v1::SyncKind sync = profile_sync == v1::SYNC_KIND_ALLREDUCE ? profile_sync : v1::SYNC_KIND_PS;
  if (spec.sync == "allreduce") sync = v1::SYNC_KIND_ALLREDUCE;
  if (spec.sync == "ps") sync = v1::SYNC_KIND_PS;
  // Where the kind came from, for the messages.
  const std::string why = spec.sync.empty() ? "the workload profile trains synchronously (sync "
                                              "allreduce)"
                                            : "sync is \"allreduce\"";
  if (sync == v1::SYNC_KIND_ALLREDUCE) {
    if (spec.has_ps_command) {
      return Bad("commands.parameter_server", json(spec.ps_command),
                 absl::StrCat(why,
                              ": a synchronous job has no parameter-server role; give only "
                              "commands.worker, the script torchrun runs on every rank"));
    }
    if (spec.has_parameter_servers) {
      return Bad("parameter_servers", json(spec.parameter_servers),
                 absl::StrCat(why, ": a synchronous job has no parameter servers"));
    }
  } else if (spec.has_elastic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "elastic: applies to a synchronous job (sync \"allreduce\"); this one trains with "
        "parameter servers",
        spec.sync.empty() ? " (its workload profile's kind)" : ""));
  } else if (spec.global_batch > 0) {
    return Bad("global_batch", json(spec.global_batch), "applies to a synchronous job");
  }
  return sync;
}

absl::StatusOr<JobSpec> ReadJobSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("job spec \"", path, "\" cannot be read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto spec = ParseJobSpec(buffer.str());
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

void SetSloTarget(const JobSpec& spec, v1::Slo* slo) {
  slo->set_target_loss(spec.target_loss);
  slo->set_target_iterations(spec.target_iterations);
  slo->set_target_epochs(spec.target_epochs);
  slo->set_dataset_size(spec.dataset_size);
  if (spec.target_metric) {
    *slo->mutable_target_metric() = *spec.target_metric;
  } else {
    slo->clear_target_metric();
  }
}

std::string CheckpointUriIn(const JobSpec& spec, const std::string& job_id,
                            const std::string& region) {
  if (spec.checkpoint_uri.empty()) return "";
  return absl::StrCat(absl::StrReplaceAll(spec.checkpoint_uri, {{"{region}", region}}), "/",
                      job_id);
}

bool CheckpointsPerRegion(const JobSpec& spec) {
  return absl::StrContains(spec.checkpoint_uri, "{region}");
}

}  // namespace spotdnn::job
