// How long spot instances live before the cloud revokes them: lifetime observations (from a
// lifetime file such as the GCE preemptible study's, or from the detector's history), a survival
// distribution per instance type (Kaplan-Meier over censored observations, or a constant
// interruption rate), and the model that gives every type of a catalog one of them.
#ifndef SPOTDNN_PROVISIONER_REVOCATION_MODEL_H_
#define SPOTDNN_PROVISIONER_REVOCATION_MODEL_H_

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spotdnn::provisioner {

// Most observations one type's distribution (or one lifetime file) may hold.
inline constexpr size_t kMaxLifetimeObservations = 1'000'000;

// One instance's observed lifetime: from its launch to its revocation, or (censored) to the last
// time it was seen alive without having been revoked (deleted by its owner, still running, or
// stopped by a cloud limit such as GCE's 24 hours for preemptible VMs).
struct LifetimeObservation {
  double lifetime_s = 0;
  bool censored = false;
};

// The observations of one section of a lifetime file.
struct LifetimeGroup {
  std::string name;  // the section's label, e.g. "K80" ("" before any label)
  int first_line = 0;
  std::vector<LifetimeObservation> observations;
};

// How a lifetime file is read.
struct LifetimeFileOptions {
  // A lifetime at or above this many seconds ended at the cloud's time limit, not by a revocation:
  // it is censored there. Default: GCE preemptible VMs' 24 hours. Infinity: none is censored
  // (every end is a revocation, e.g. when the limit itself should count as one).
  double censor_at_s = 24 * 3600.0;
};

// A parsed lifetime file.
struct LifetimeFile {
  std::string source;                 // the path (or what the caller named the text)
  std::vector<LifetimeGroup> groups;  // in file order; groups without observations are dropped
  int rows_used = 0;
  int rows_skipped = 0;               // data-like rows that could not be used
  std::vector<std::string> problems;  // "line N: reason" for the first skipped rows

  // The group called `name` (case-insensitive), or nullptr.
  const LifetimeGroup* Find(absl::string_view name) const;
};

// Parses a lifetime CSV in the shape of the GCE preemptible study's `lifetime.csv`:
//   - a row with only its first cell set ("K80,,") starts a section named by that cell;
//   - a data row is NAME,START,END[,...] with START and END either date-times ("2/18/19 23:40",
//     "2/18/2019 23:40:05", "2019-02-18 23:40[:05]", "2019-02-18T23:40:05Z") or times of day
//     ("09:49:51"; an END before START crossed midnight, so a lifetime is under 24 h);
//   - any other row (column headers such as "VM name,Start,Terminate") is skipped.
// Rows that look like data but cannot be used (an hour of 1046985, an end before the start, a date
// and a bare time mixed) are counted and described, not fatal. INVALID_ARGUMENT (naming `source`)
// when no row yields a lifetime; CRLF line ends, a UTF-8 BOM and quoted cells are accepted.
absl::StatusOr<LifetimeFile> ParseLifetimeCsv(absl::string_view text, absl::string_view source,
                                              const LifetimeFileOptions& options = {});
// Reads and parses a lifetime file; NOT_FOUND naming the path when it cannot be read.
absl::StatusOr<LifetimeFile> ReadLifetimeCsv(const std::string& path,
                                             const LifetimeFileOptions& options = {});

// A survival distribution of instance lifetimes: S(t) = P(lifetime > t).
class LifetimeDistribution {
 public:
  enum class Kind { kNever, kExponential, kKaplanMeier };

  // Never revoked.
  LifetimeDistribution() = default;
  // A constant hazard: S(t) = exp(-rate t). INVALID_ARGUMENT unless rate is finite and >= 0
  // (0 = never revoked).
  static absl::StatusOr<LifetimeDistribution> Exponential(double rate_per_hour);
  // The Kaplan-Meier estimate from censored observations. Past the longest observation it goes on
  // with a constant hazard equal to the estimate's average one there, -ln S(t_max) / t_max (with
  // no revocation observed at all: never revoked). INVALID_ARGUMENT for no observations, a
  // negative or non-finite lifetime, or more than kMaxLifetimeObservations.
  static absl::StatusOr<LifetimeDistribution> KaplanMeier(
      std::vector<LifetimeObservation> observations);

  Kind kind() const { return kind_; }
  // S(t) for t >= 0 (seconds).
  double Survival(double t_s) const;
  // A 95% pointwise interval of S(t): Greenwood's variance on the log-log scale for Kaplan-Meier
  // (within the observed range; past it, and for the other kinds, the estimate itself).
  void SurvivalInterval(double t_s, double* low, double* high) const;
  // The lifetime whose survival is `u` (inverse transform): for u uniform in (0, 1) the result is
  // distributed as a lifetime; +infinity when it is never revoked.
  double Quantile(double u) const;
  // Probability of a revocation within [0, t].
  double RevokedBy(double t_s) const { return 1 - Survival(t_s); }

  double rate_per_hour() const { return rate_per_s_ * 3600; }  // exponential, or the KM tail
  int observations() const { return observations_; }
  int revocations() const { return revocations_; }
  double longest_observation_s() const { return t_max_; }
  // "Kaplan-Meier, 64 lifetimes (18 revoked, 46 censored)", "exponential, 0.05/h", "never".
  std::string Describe() const;

 private:
  Kind kind_ = Kind::kNever;
  double rate_per_s_ = 0;  // exponential rate, or the KM tail's
  // Kaplan-Meier: the distinct revocation times, S just after each, and Greenwood's sum there.
  std::vector<double> times_;
  std::vector<double> survival_;
  std::vector<double> greenwood_;
  double t_max_ = 0;  // longest observation (KM)
  int observations_ = 0;
  int revocations_ = 0;
};

// What one catalog type's revocation model is built from, in order of precedence.
struct TypeRevocationInput {
  std::string instance_type;
  std::string gpu_type;
  std::vector<LifetimeObservation> observations;  // e.g. stored with the catalog
  std::string observations_source;
  double interruption_rate_per_hour = 0;  // 0 = not given
};

// Each catalog type's lifetime distribution and where it came from.
struct RevocationModel {
  std::vector<LifetimeDistribution> types;  // indexed like the catalog's types
  std::vector<std::string> sources;         // per type, for people

  // True when at least one type can be revoked.
  bool AnyRevocable() const;
};

// Builds a type's distribution from its observations, else its interruption rate, else never.
// INVALID_ARGUMENT names the type and field for bad numbers.
absl::StatusOr<RevocationModel> BuildRevocationModel(const std::vector<TypeRevocationInput>& types);

// What a type without a matching section of a lifetime file gets.
enum class UnmatchedTypes {
  kPooled,  // the pooled lifetimes of every section some type matched (every section if none)
  kNever,   // never revoked (its catalog data, when it has some, still applies)
  kRefuse,  // INVALID_ARGUMENT naming the type
};

// The observations a lifetime file gives each catalog type: the section named like its GPU type
// (or like the type itself, or as `mapping` says: type or GPU name -> section), case-insensitive.
// Types no section matches get what `unmatched` says. Returns, per catalog type, the observations
// and a description of their source ("" for none). INVALID_ARGUMENT names a mapping entry whose
// section is not in the file, or (kRefuse) the first unmatched type.
struct MappedLifetimes {
  std::vector<std::vector<LifetimeObservation>> observations;  // per catalog type
  std::vector<std::string> sources;                            // per catalog type
  std::vector<bool> matched;  // per catalog type: a section matched it (else `unmatched` applied)
};
absl::StatusOr<MappedLifetimes> MapLifetimes(const LifetimeFile& file,
                                             const std::vector<TypeRevocationInput>& types,
                                             const std::map<std::string, std::string>& mapping,
                                             UnmatchedTypes unmatched);

// Gives `types` the lifetimes of `file`: a type a section matches (see MapLifetimes) takes that
// section's observations over what it had; a type none matches keeps its own observations or
// interruption rate, and only when it has neither gets what `unmatched` says (the pool, nothing,
// or INVALID_ARGUMENT naming it).
absl::Status ApplyLifetimeFile(const LifetimeFile& file,
                               const std::map<std::string, std::string>& mapping,
                               UnmatchedTypes unmatched, std::vector<TypeRevocationInput>& types);

// A small, fast pseudo-random generator (xoshiro256**, seeded by SplitMix64) whose output is the
// same on every platform and library version, unlike std:: distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in (0, 1), never 0 or 1.
  double Uniform();

 private:
  uint64_t s_[4];
};

// SplitMix64's output for `x`: mixes seeds and run numbers into independent streams.
uint64_t MixSeed(uint64_t x);

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_REVOCATION_MODEL_H_
