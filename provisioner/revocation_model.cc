#include "provisioner/revocation_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace spotdnn::provisioner {
namespace {

constexpr double kDay = 86400;
constexpr size_t kMaxProblems = 20;

// One CSV line's cells (double quotes group commas; "" inside quotes is a quote), trimmed.
std::vector<std::string> SplitCsv(absl::string_view line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  for (std::string& cell : cells) absl::StripAsciiWhitespace(&cell);
  return cells;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool LeapYear(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int DaysIn(int64_t y, int m) {
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && LeapYear(y) ? 29 : kDays[m - 1];
}

// A timestamp cell: a date-time (seconds since the epoch, no time zone) or a time of day
// (seconds since midnight).
struct Stamp {
  bool has_date = false;
  double seconds = 0;
};

// Whole digits of `text` into `out`.
bool Digits(absl::string_view text, int64_t* out) {
  if (text.empty() || text.size() > 12) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(text, out);
}

// "H:MM", "H:MM:SS", "H:MM:SS.fff" -> seconds since midnight.
absl::StatusOr<double> ParseTimeOfDay(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() < 2 || parts.size() > 3) {
    return absl::InvalidArgumentError("expected H:MM or H:MM:SS");
  }
  int64_t h = 0, m = 0;
  if (!Digits(parts[0], &h) || !Digits(parts[1], &m) || parts[1].size() != 2) {
    return absl::InvalidArgumentError("expected H:MM or H:MM:SS");
  }
  double s = 0;
  if (parts.size() == 3) {
    const absl::string_view whole = parts[2].substr(0, parts[2].find('.'));
    int64_t si = 0;
    if (whole.size() != 2 || !Digits(whole, &si) || !absl::SimpleAtod(parts[2], &s)) {
      return absl::InvalidArgumentError("expected seconds as SS");
    }
  }
  if (h > 23) return absl::InvalidArgumentError(absl::StrCat("hour ", h, " is out of range"));
  if (m > 59) return absl::InvalidArgumentError(absl::StrCat("minute ", m, " is out of range"));
  if (s >= 61) return absl::InvalidArgumentError(absl::StrCat("second ", s, " is out of range"));
  return h * 3600.0 + m * 60.0 + s;
}

absl::StatusOr<Stamp> ParseStamp(absl::string_view raw) {
  std::string text(raw);
  if (!text.empty() && (text.back() == 'Z' || text.back() == 'z')) text.pop_back();
  // Date and time are separated by a space or a 'T'.
  size_t sep = text.find(' ');
  if (sep == std::string::npos && text.size() > 10 && text[4] == '-') sep = text.find('T');
  if (sep == std::string::npos) {
    if (text.find('/') != std::string::npos || text.find('-') != std::string::npos) {
      return absl::InvalidArgumentError("a date without a time");
    }
    auto tod = ParseTimeOfDay(text);
    if (!tod.ok()) return tod.status();
    return Stamp{.has_date = false, .seconds = *tod};
  }
  const absl::string_view date = absl::StripAsciiWhitespace(absl::string_view(text).substr(0, sep));
  const absl::string_view time =
      absl::StripAsciiWhitespace(absl::string_view(text).substr(sep + 1));
  int64_t y = 0, mo = 0, d = 0;
  std::vector<absl::string_view> parts;
  if (date.find('/') != absl::string_view::npos) {  // M/D/YY or M/D/YYYY
    parts = absl::StrSplit(date, '/');
    if (parts.size() != 3 || !Digits(parts[0], &mo) || !Digits(parts[1], &d) ||
        !Digits(parts[2], &y) || (parts[2].size() != 2 && parts[2].size() != 4)) {
      return absl::InvalidArgumentError("expected a date as M/D/YY or M/D/YYYY");
    }
    if (parts[2].size() == 2) y += y < 70 ? 2000 : 1900;
  } else {  // YYYY-MM-DD
    parts = absl::StrSplit(date, '-');
    if (parts.size() != 3 || parts[0].size() != 4 || !Digits(parts[0], &y) ||
        !Digits(parts[1], &mo) || !Digits(parts[2], &d)) {
      return absl::InvalidArgumentError("expected a date as YYYY-MM-DD or M/D/YY");
    }
  }
  if (mo < 1 || mo > 12) return absl::InvalidArgumentError(absl::StrCat("month ", mo));
  if (d < 1 || d > DaysIn(y, static_cast<int>(mo))) {
    return absl::InvalidArgumentError(absl::StrCat("day ", d, " of month ", mo));
  }
  auto tod = ParseTimeOfDay(time);
  if (!tod.ok()) return tod.status();
  return Stamp{
      .has_date = true,
      .seconds =
          DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * kDay + *tod};
}

// True when a cell looks like it was meant to be a timestamp (so a failure to parse it is a
// problem worth reporting, not a column header).
bool TimestampLike(absl::string_view cell) {
  return !cell.empty() && absl::ascii_isdigit(static_cast<unsigned char>(cell[0])) &&
         (cell.find(':') != absl::string_view::npos || cell.find('/') != absl::string_view::npos);
}

std::string Lower(absl::string_view s) { return absl::AsciiStrToLower(s); }

}  // namespace

const LifetimeGroup* LifetimeFile::Find(absl::string_view name) const {
  for (const LifetimeGroup& g : groups) {
    if (absl::EqualsIgnoreCase(g.name, name)) return &g;
  }
  return nullptr;
}

absl::StatusOr<LifetimeFile> ParseLifetimeCsv(absl::string_view text, absl::string_view source,
                                              const LifetimeFileOptions& options) {
  if (!(options.censor_at_s > 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "censor_at_s = %g: must be positive (infinity: censor none)", options.censor_at_s));
  }
  LifetimeFile file;
  file.source = std::string(source);
  if (absl::StartsWith(text, "\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<LifetimeGroup> groups(1);  // rows before any label go to a group named ""
  size_t observations = 0;
  int line_number = 0;
  auto problem = [&](const std::string& why) {
    ++file.rows_skipped;
    if (file.problems.size() < kMaxProblems) {
      file.problems.push_back(absl::StrCat("line ", line_number, ": ", why));
    }
  };
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::vector<std::string> cells = SplitCsv(line);
    const bool rest_empty =
        std::all_of(cells.begin() + 1, cells.end(), [](const std::string& c) { return c.empty(); });
    if (rest_empty) {
      if (!cells[0].empty()) {
        groups.push_back({.name = cells[0], .first_line = line_number});
      }
      continue;
    }
    if (cells.size() < 3) {
      if (TimestampLike(cells.size() > 1 ? cells[1] : "")) problem("expected NAME,START,END");
      continue;
    }
    auto start = ParseStamp(cells[1]);
    auto end = ParseStamp(cells[2]);
    if (!start.ok() || !end.ok()) {
      if (TimestampLike(cells[1]) || TimestampLike(cells[2])) {
        problem(!start.ok() ? absl::StrCat("start \"", cells[1], "\": ", start.status().message())
                            : absl::StrCat("end \"", cells[2], "\": ", end.status().message()));
      }
      continue;  // a column header such as "VM name,Start,Terminate"
    }
    if (start->has_date != end->has_date) {
      problem(absl::StrCat("start \"", cells[1], "\" and end \"", cells[2],
                           "\": one has a date and the other not"));
      continue;
    }
    double lifetime = end->seconds - start->seconds;
    if (!start->has_date && lifetime < 0) lifetime += kDay;  // crossed midnight
    if (lifetime < 0) {
      problem(absl::StrCat("ends (", cells[2], ") before it starts (", cells[1], ")"));
      continue;
    }
    if (++observations > kMaxLifetimeObservations) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: more than %d lifetimes; split the file", source, kMaxLifetimeObservations));
    }
    groups.back().observations.push_back(
        {.lifetime_s = lifetime, .censored = lifetime >= options.censor_at_s});
    ++file.rows_used;
  }
  for (LifetimeGroup& g : groups) {
    if (!g.observations.empty()) file.groups.push_back(std::move(g));
  }
  if (file.groups.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source,
        ": no lifetimes found (expected rows NAME,START,END under section labels such as "
        "\"K80,,\")",
        file.problems.empty() ? "" : absl::StrCat("; ", file.problems.front())));
  }
  return file;
}

absl::StatusOr<LifetimeFile> ReadLifetimeCsv(const std::string& path,
                                             const LifetimeFileOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("lifetime file \"", path, "\" cannot be read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseLifetimeCsv(buffer.str(), path, options);
}

absl::StatusOr<LifetimeDistribution> LifetimeDistribution::Exponential(double rate_per_hour) {
  if (!(std::isfinite(rate_per_hour) && rate_per_hour >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "interruption_rate_per_hour = %g: must be a finite number >= 0", rate_per_hour));
  }
  LifetimeDistribution d;
  if (rate_per_hour == 0) return d;
  d.kind_ = Kind::kExponential;
  d.rate_per_s_ = rate_per_hour / 3600;
  return d;
}

absl::StatusOr<LifetimeDistribution> LifetimeDistribution::KaplanMeier(
    std::vector<LifetimeObservation> observations) {
  if (observations.empty()) {
    return absl::InvalidArgumentError("lifetimes: no observations");
  }
  if (observations.size() > kMaxLifetimeObservations) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lifetimes: %d observations, more than %d", observations.size(), kMaxLifetimeObservations));
  }
  for (size_t i = 0; i < observations.size(); ++i) {
    const double t = observations[i].lifetime_s;
    if (!(std::isfinite(t) && t >= 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "lifetimes.observations[%d].lifetime_s = %g: must be a finite number >= 0", i, t));
    }
  }
  // By time; at equal times revocations first, so censored lifetimes are at risk at that time.
  std::sort(observations.begin(), observations.end(),
            [](const LifetimeObservation& a, const LifetimeObservation& b) {
              if (a.lifetime_s != b.lifetime_s) return a.lifetime_s < b.lifetime_s;
              return !a.censored && b.censored;
            });
  LifetimeDistribution d;
  d.kind_ = Kind::kKaplanMeier;
  d.observations_ = static_cast<int>(observations.size());
  d.t_max_ = observations.back().lifetime_s;
  double s = 1, greenwood = 0;
  size_t i = 0;
  const size_t n = observations.size();
  while (i < n) {
    const double t = observations[i].lifetime_s;
    const size_t at_risk = n - i;
    size_t deaths = 0, j = i;
    for (; j < n && observations[j].lifetime_s == t; ++j) deaths += !observations[j].censored;
    if (deaths > 0) {
      s *= 1 - static_cast<double>(deaths) / at_risk;
      greenwood += deaths == at_risk ? std::numeric_limits<double>::infinity()
                                     : static_cast<double>(deaths) / (at_risk * (at_risk - deaths));
      d.times_.push_back(t);
      d.survival_.push_back(s);
      d.greenwood_.push_back(greenwood);
      d.revocations_ += static_cast<int>(deaths);
    }
    i = j;
  }
  if (s > 0 && s < 1 && d.t_max_ > 0) d.rate_per_s_ = -std::log(s) / d.t_max_;
  return d;
}

double LifetimeDistribution::Survival(double t_s) const {
  if (t_s < 0) return 1;
  switch (kind_) {
    case Kind::kNever:
      return 1;
    case Kind::kExponential:
      return std::exp(-rate_per_s_ * t_s);
    case Kind::kKaplanMeier:
      break;
  }
  const size_t i = std::upper_bound(times_.begin(), times_.end(), t_s) - times_.begin();
  const double s = i == 0 ? 1.0 : survival_[i - 1];
  if (t_s <= t_max_ || s == 0) return s;
  return s * std::exp(-rate_per_s_ * (t_s - t_max_));
}

void LifetimeDistribution::SurvivalInterval(double t_s, double* low, double* high) const {
  const double s = Survival(t_s);
  *low = *high = s;
  if (kind_ != Kind::kKaplanMeier || t_s > t_max_ || s <= 0 || s >= 1) return;
  const size_t i = std::upper_bound(times_.begin(), times_.end(), t_s) - times_.begin();
  const double v = greenwood_[i - 1] / (std::log(s) * std::log(s));
  if (!std::isfinite(v)) {
    *low = 0;
    *high = 1;
    return;
  }
  const double c = 1.959963984540054 * std::sqrt(v);
  *low = std::pow(s, std::exp(c));
  *high = std::pow(s, std::exp(-c));
}

double LifetimeDistribution::Quantile(double u) const {
  constexpr double kNeverRevoked = std::numeric_limits<double>::infinity();
  if (!(u > 0)) u = std::numeric_limits<double>::min();
  if (u >= 1) return 0;
  switch (kind_) {
    case Kind::kNever:
      return kNeverRevoked;
    case Kind::kExponential:
      return -std::log(u) / rate_per_s_;
    case Kind::kKaplanMeier:
      break;
  }
  // The first revocation time where S has fallen to u or below.
  const auto it =
      std::partition_point(survival_.begin(), survival_.end(), [u](double s) { return s > u; });
  if (it != survival_.end()) return times_[it - survival_.begin()];
  if (rate_per_s_ <= 0) return kNeverRevoked;
  const double s_last = survival_.empty() ? 1.0 : survival_.back();
  return t_max_ + std::log(s_last / u) / rate_per_s_;
}

std::string LifetimeDistribution::Describe() const {
  switch (kind_) {
    case Kind::kNever:
      return "never revoked";
    case Kind::kExponential:
      return absl::StrFormat("exponential, %.4g revocations per hour", rate_per_hour());
    case Kind::kKaplanMeier:
      break;
  }
  return absl::StrFormat("Kaplan-Meier, %d lifetimes (%d revoked, %d censored)", observations_,
                         revocations_, observations_ - revocations_);
}

bool RevocationModel::AnyRevocable() const {
  for (const LifetimeDistribution& d : types) {
    if (d.kind() == LifetimeDistribution::Kind::kExponential) return true;
    if (d.kind() == LifetimeDistribution::Kind::kKaplanMeier &&
        (d.revocations() > 0 || d.rate_per_hour() > 0)) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<RevocationModel> BuildRevocationModel(
    const std::vector<TypeRevocationInput>& types) {
  RevocationModel model;
  for (const TypeRevocationInput& t : types) {
    if (!t.observations.empty()) {
      auto d = LifetimeDistribution::KaplanMeier(t.observations);
      if (!d.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("lifetimes of ", t.instance_type, ": ", d.status().message()));
      }
      model.sources.push_back(absl::StrCat(
          d->Describe(), t.observations_source.empty() ? "" : ", from ", t.observations_source));
      model.types.push_back(*std::move(d));
      continue;
    }
    auto d = LifetimeDistribution::Exponential(t.interruption_rate_per_hour);
    if (!d.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(t.instance_type, ".", d.status().message()));
    }
    model.sources.push_back(
        t.interruption_rate_per_hour > 0
            ? absl::StrCat(d->Describe(), ", from the catalog's interruption_rate_per_hour")
            : std::string("never revoked (no lifetimes and no interruption_rate_per_hour)"));
    model.types.push_back(*std::move(d));
  }
  return model;
}

absl::StatusOr<MappedLifetimes> MapLifetimes(const LifetimeFile& file,
                                             const std::vector<TypeRevocationInput>& types,
                                             const std::map<std::string, std::string>& mapping,
                                             UnmatchedTypes unmatched) {
  std::map<std::string, const LifetimeGroup*> by_key;  // lower-case type or GPU name -> section
  for (const auto& [key, section] : mapping) {
    const LifetimeGroup* g = file.Find(section);
    if (g == nullptr) {
      std::vector<std::string> names;
      for (const LifetimeGroup& group : file.groups) names.push_back("\"" + group.name + "\"");
      return absl::InvalidArgumentError(
          absl::StrCat("mapping ", key, "=", section, ": no section \"", section, "\" in ",
                       file.source, " (sections: ", absl::StrJoin(names, ", "), ")"));
    }
    const bool known = std::any_of(types.begin(), types.end(), [&](const TypeRevocationInput& t) {
      return absl::EqualsIgnoreCase(t.instance_type, key) ||
             absl::EqualsIgnoreCase(t.gpu_type, key);
    });
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("mapping ", key, "=", section,
                                                     ": no instance type or GPU type \"", key,
                                                     "\" in the catalog"));
    }
    by_key[Lower(key)] = g;
  }
  MappedLifetimes out;
  out.observations.resize(types.size());
  out.sources.resize(types.size());
  out.matched.assign(types.size(), false);
  std::vector<const LifetimeGroup*> matched(types.size(), nullptr);
  std::set<const LifetimeGroup*> used;
  for (size_t k = 0; k < types.size(); ++k) {
    const TypeRevocationInput& t = types[k];
    const LifetimeGroup* g = nullptr;
    for (const std::string& key : {Lower(t.instance_type), Lower(t.gpu_type)}) {
      if (g == nullptr && !key.empty() && by_key.count(key)) g = by_key[key];
    }
    if (g == nullptr && !t.gpu_type.empty()) g = file.Find(t.gpu_type);
    if (g == nullptr) g = file.Find(t.instance_type);
    if (g == nullptr) continue;
    matched[k] = g;
    out.matched[k] = true;
    used.insert(g);
    out.observations[k] = g->observations;
    out.sources[k] = absl::StrFormat("%s, section \"%s\"", file.source, g->name);
    if (g->first_line > 0) absl::StrAppendFormat(&out.sources[k], " (line %d)", g->first_line);
  }
  // The pool: every section some type matched, or every section when none did.
  std::vector<LifetimeObservation> pool;
  std::vector<std::string> pool_names;
  for (const LifetimeGroup& g : file.groups) {
    if (!used.empty() && used.count(&g) == 0) continue;
    pool.insert(pool.end(), g.observations.begin(), g.observations.end());
    pool_names.push_back(g.name.empty() ? std::string("(unlabelled)") : g.name);
  }
  for (size_t k = 0; k < types.size(); ++k) {
    if (matched[k] != nullptr) continue;
    const TypeRevocationInput& t = types[k];
    switch (unmatched) {
      case UnmatchedTypes::kRefuse:
        return absl::InvalidArgumentError(absl::StrCat(
            "instance type ", t.instance_type, " (GPU ", t.gpu_type.empty() ? "?" : t.gpu_type,
            "): no section of ", file.source,
            " matches it; map it to one (TYPE=SECTION) or let unmatched types use the pooled "
            "lifetimes"));
      case UnmatchedTypes::kNever:
        out.sources[k] = absl::StrCat("no section of ", file.source, " for GPU ", t.gpu_type);
        break;
      case UnmatchedTypes::kPooled:
        out.observations[k] = pool;
        out.sources[k] =
            absl::StrCat(file.source, ", pooled sections ", absl::StrJoin(pool_names, "+"),
                         " (no section for GPU ", t.gpu_type.empty() ? "?" : t.gpu_type, ")");
        break;
    }
  }
  return out;
}

absl::Status ApplyLifetimeFile(const LifetimeFile& file,
                               const std::map<std::string, std::string>& mapping,
                               UnmatchedTypes unmatched, std::vector<TypeRevocationInput>& types) {
  auto mapped = MapLifetimes(file, types, mapping, UnmatchedTypes::kPooled);
  if (!mapped.ok()) return mapped.status();
  for (size_t k = 0; k < types.size(); ++k) {
    TypeRevocationInput& t = types[k];
    const bool own = !t.observations.empty() || t.interruption_rate_per_hour > 0;
    if (!mapped->matched[k] && (own || unmatched == UnmatchedTypes::kNever)) continue;
    if (!mapped->matched[k] && unmatched == UnmatchedTypes::kRefuse) {
      return absl::InvalidArgumentError(absl::StrCat(
          "instance type ", t.instance_type, " (GPU ", t.gpu_type.empty() ? "?" : t.gpu_type,
          "): no section of ", file.source,
          " matches it and the catalog has no lifetimes or interruption_rate_per_hour for it; map "
          "it to a section (TYPE=SECTION) or let unmatched types use the pooled lifetimes"));
    }
    t.observations = mapped->observations[k];
    t.observations_source = mapped->sources[k];
  }
  return absl::OkStatus();
}

uint64_t MixSeed(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) {
    seed = MixSeed(seed);
    s = seed;
  }
}

uint64_t Rng::Next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::Uniform() {
  // 53 random bits at the centre of one of 2^53 equal cells of (0, 1).
  return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace spotdnn::provisioner
