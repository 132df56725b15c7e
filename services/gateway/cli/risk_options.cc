#include "services/gateway/cli/risk_options.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "services/gateway/job/lifetimes.h"

namespace spotdnn::gateway {

std::vector<FlagHelp> SimulationFlagHelp() {
  return {
      {"--lifetimes", "FILE",
       "instance lifetimes, a CSV shaped like the GCE preemptible study's\n(sections \"K80,,\", "
       "rows NAME,START,END); a section applies to the catalog types\nwith that GPU type. "
       "Without it: the catalog's own lifetimes and\ninterruption_rate_per_hour (spotdnn catalog "
       "hazards)"},
      {"--censor-at", "D|none",
       "lifetimes this long or longer hit the cloud's limit, not a revocation:\ncensored "
       "(default 24h, GCE preemptible VMs' limit)"},
      {"--map", "TYPE=SECTION,...",
       "use a section for an instance or GPU type the names do not match"},
      {"--unmatched", "pooled|never|refuse",
       "a type no section matches and the catalog has no data for: the pooled\nlifetimes of "
       "the matched sections (default), never revoked, or an error"},
      {"--runs", "N", "simulated runs per plan (default 10000)"},
      {"--seed", "S", "the random seed (default 0); the same seed gives the same numbers"},
      {"--notice", "D",
       "the revocation notice comes this long before the instance goes (AWS 2m,\nGCE 30s; "
       "default 0)"},
      {"--takeover-delay", "D", "from the notice to the takeover training (default: --overhead)"},
      {"--lost-iterations", "N", "normalized iterations lost per revocation (default 1: its step)"},
      {"--restart", "D",
       "a synchronous job: every rank's restart after a revocation or a join\n(default: the "
       "profile's restart_s, else 20s, as measured)"},
      {"--checkpoint-every", "D",
       "a synchronous job: its checkpoint interval; a restart redoes the training\nsince the "
       "last (default: the profile's checkpoint_every_s, else 10m)"},
      {"--min-instances", "N",
       "a synchronous job: the fewest instances it trains on (elastic; default 1)"},
      {"--replan-resolution", "F",
       "round re-plan inputs to this fraction of the deadline (faster, biased\nup; default 0: "
       "exact, as the gateway)"},
      {"--screening-runs", "N",
       "confidence search: runs per candidate before the full runs (1000)"},
      {"--max-candidates", "N", "confidence search: candidates simulated (default 64)"},
  };
}

namespace {

absl::StatusOr<int> PositiveInt(const Args& args, const char* flag, int max) {
  return ParseInt(flag, *args.Get(flag), 1, max);
}

}  // namespace

absl::Status SimulationFlags(const Args& args, pb::SimulationOptions* options) {
  double censor_at = 24 * 3600.0;
  if (auto c = args.Get("--censor-at")) {
    if (*c == "none") {
      censor_at = std::numeric_limits<double>::infinity();
    } else {
      auto d = ParseDuration("--censor-at", *c);
      if (!d.ok()) return d.status();
      censor_at = *d;
    }
  }
  if (auto path = args.Get("--lifetimes")) {
    if (auto s = job::AddLifetimeFile(*path, censor_at, options); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--lifetimes: ", s.message()));
    }
  } else if (args.Has("--censor-at") || args.Has("--map") || args.Has("--unmatched")) {
    return absl::InvalidArgumentError(
        "--censor-at, --map and --unmatched apply to a lifetime file: give --lifetimes FILE");
  }
  if (auto m = args.Get("--map")) {
    for (absl::string_view pair : absl::StrSplit(*m, ',', absl::SkipEmpty())) {
      std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--map = \"", *m, "\": expected TYPE=SECTION[,TYPE=SECTION...]"));
      }
      (*options->mutable_lifetime_mapping())[kv[0]] = kv[1];
    }
  }
  if (auto u = args.Get("--unmatched")) {
    if (*u == "pooled") {
      options->set_unmatched_types(pb::UNMATCHED_TYPES_POOLED);
    } else if (*u == "never") {
      options->set_unmatched_types(pb::UNMATCHED_TYPES_NEVER);
    } else if (*u == "refuse") {
      options->set_unmatched_types(pb::UNMATCHED_TYPES_REFUSE);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--unmatched = \"", *u, "\": expected pooled, never or refuse"));
    }
  }
  if (args.Has("--runs")) {
    auto runs = PositiveInt(args, "--runs", 1'000'000);
    if (!runs.ok()) return runs.status();
    options->set_runs(*runs);
  }
  if (auto s = args.Get("--seed")) {
    uint64_t seed = 0;
    if (!absl::SimpleAtoi(*s, &seed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--seed = \"", *s, "\": expected a whole number from 0 to 2^64-1"));
    }
    options->set_seed(seed);
  }
  if (auto n = args.Get("--notice")) {
    auto d = ParseDuration("--notice", *n, /*allow_zero=*/true);
    if (!d.ok()) return d.status();
    options->set_notice_s(*d);
  }
  if (auto n = args.Get("--takeover-delay")) {
    auto d = ParseDuration("--takeover-delay", *n, /*allow_zero=*/true);
    if (!d.ok()) return d.status();
    options->set_takeover_delay_s(*d);
  }
  if (auto n = args.Get("--lost-iterations")) {
    auto x = ParseNumber("--lost-iterations", *n);
    if (!x.ok()) return x.status();
    if (*x < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lost-iterations = \"", *n, "\": must not be negative"));
    }
    options->set_lost_iterations_per_revocation(*x);
  }
  if (auto n = args.Get("--restart")) {
    auto d = ParseDuration("--restart", *n, /*allow_zero=*/true);
    if (!d.ok()) return d.status();
    options->set_restart_s(*d);
  }
  if (auto n = args.Get("--checkpoint-every")) {
    auto d = ParseDuration("--checkpoint-every", *n);
    if (!d.ok()) return d.status();
    options->set_checkpoint_every_s(*d);
  }
  if (args.Has("--min-instances")) {
    auto n = PositiveInt(args, "--min-instances", 100'000);
    if (!n.ok()) return n.status();
    options->set_min_instances(*n);
  }
  if (auto n = args.Get("--replan-resolution")) {
    auto x = ParseNumber("--replan-resolution", *n);
    if (!x.ok()) return x.status();
    if (!(*x >= 0 && *x <= 0.1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--replan-resolution = \"", *n, "\": must be in [0, 0.1] (0 = exact)"));
    }
    options->set_replan_resolution(*x);
  }
  if (args.Has("--screening-runs")) {
    auto runs = PositiveInt(args, "--screening-runs", 100'000);
    if (!runs.ok()) return runs.status();
    options->set_screening_runs(*runs);
  }
  if (args.Has("--max-candidates")) {
    auto n = PositiveInt(args, "--max-candidates", 256);
    if (!n.ok()) return n.status();
    options->set_max_candidates(*n);
  }
  return absl::OkStatus();
}

JsonObject RiskJson(const pb::RiskEstimate& r) {
  JsonObject o;
  o.Number("p_meet_deadline", r.p_meet_deadline())
      .Number("p_meet_deadline_low", r.p_meet_deadline_low())
      .Number("p_meet_deadline_high", r.p_meet_deadline_high())
      .Number("p_meet_slo", r.p_meet_slo())
      .Number("p_no_revocation", r.p_no_revocation())
      .Number("expected_cost_usd", r.expected_cost_usd())
      .Number("cost_p50_usd", r.cost_p50_usd())
      .Number("cost_p90_usd", r.cost_p90_usd())
      .Number("expected_time_s", r.expected_time_s())
      .Number("time_p50_s", r.time_p50_s())
      .Number("time_p90_s", r.time_p90_s())
      .Number("revocations_per_run", r.mean_revocations())
      .Number("max_revocations", r.max_revocations())
      .Integer("unfinished_runs", r.unfinished_runs())
      .Integer("runs", r.runs())
      .Raw("seed", absl::StrCat(r.seed()))  // a number, as every other count
      .Integer("replans", static_cast<long long>(r.replans()))
      .Integer("replans_solved", static_cast<long long>(r.replans_solved()));
  if (r.synchronous()) {
    o.Bool("synchronous", true)
        .Number("restart_s", r.restart_s())
        .Number("checkpoint_every_s", r.checkpoint_every_s())
        .Number("restarts_per_run", r.mean_restarts())
        .Number("redone_mean_s", r.redone_mean_s())
        .Number("redone_p50_s", r.redone_p50_s())
        .Number("redone_p90_s", r.redone_p90_s())
        .Number("redone_mean_steps", r.redone_mean_steps())
        .Number("redone_p50_steps", r.redone_p50_steps())
        .Number("redone_p90_steps", r.redone_p90_steps());
  }
  return o;
}

std::string Probability(const pb::RiskEstimate& r) {
  return absl::StrFormat("%.4f [%.4f, %.4f]", r.p_meet_deadline(), r.p_meet_deadline_low(),
                         r.p_meet_deadline_high());
}

}  // namespace spotdnn::gateway
