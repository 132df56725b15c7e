#include "provisioner/deadline/availability_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/text.h"

namespace spotdnn::provisioner::deadline {
namespace {

absl::Status Bad(absl::string_view source, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": ", what));
}

// A small scanner over the JSON text that keeps the line number.
class Scanner {
 public:
  explicit Scanner(absl::string_view text) : text_(text) {}
  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      if (text_[pos_] == '\n') ++line_;
      ++pos_;
    }
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ >= text_.size();
  }
  char Peek() {
    SkipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  // A string literal (no escapes beyond \" and \\ needed for the keys we read).
  bool String(std::string* out) {
    if (!Consume('"')) return false;
    out->clear();
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      if (text_[pos_] == '\n') ++line_;
      out->push_back(text_[pos_++]);
    }
    if (pos_ >= text_.size()) return false;
    ++pos_;
    return true;
  }
  // The raw text of a scalar (number, true, false, null; a string with its quotes).
  absl::string_view Scalar() {
    SkipSpace();
    const size_t begin = pos_;
    if (pos_ < text_.size() && text_[pos_] == '"') {
      std::string ignored;
      if (String(&ignored)) return text_.substr(begin, pos_ - begin);
      pos_ = begin;
    }
    while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != ']' && text_[pos_] != '}' &&
           !absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
    return text_.substr(begin, pos_ - begin);
  }
  // Skips any JSON value (for metadata fields we do not read).
  bool SkipValue() {
    const char c = Peek();
    if (c == '"') {
      std::string s;
      return String(&s);
    }
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      if (Consume(close)) return true;
      while (true) {
        if (c == '{') {
          std::string key;
          if (!String(&key) || !Consume(':')) return false;
        }
        if (!SkipValue()) return false;
        if (Consume(',')) continue;
        return Consume(close);
      }
    }
    return !Scalar().empty();
  }
  int line() const { return line_; }

 private:
  absl::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
};

bool ParseCount(absl::string_view text, int* out) {
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v) || v != std::floor(v) || v > 1e9 ||
      v < -1e9) {
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

size_t AvailabilityTrace::TickAt(double t) const {
  if (!(t > 0)) return 0;
  const double tick = std::floor(t / gap_s);
  if (tick >= static_cast<double>(counts.size())) return counts.size() - 1;
  return static_cast<size_t>(tick);
}

absl::StatusOr<AvailabilityTrace> ParseJsonTrace(absl::string_view text, absl::string_view source) {
  AvailabilityTrace trace;
  trace.source = std::string(source);
  Scanner s(text);
  if (!s.Consume('{')) return Bad(source, s.line(), "expected a JSON object");
  bool have_gap = false, have_data = false;
  int gap_line = 1;
  if (!s.Consume('}')) {
    while (true) {
      std::string key;
      if (!s.String(&key) || !s.Consume(':')) return Bad(source, s.line(), "expected \"key\":");
      if (key == "metadata") {
        if (!s.Consume('{')) return Bad(source, s.line(), "metadata: expected an object");
        if (!s.Consume('}')) {
          while (true) {
            std::string mkey;
            if (!s.String(&mkey) || !s.Consume(':')) {
              return Bad(source, s.line(), "metadata: expected \"key\":");
            }
            if (mkey == "gap_seconds") {
              gap_line = s.line();
              const absl::string_view v = s.Scalar();
              gap_line = s.line();
              double gap = 0;
              if (!absl::SimpleAtod(v, &gap) || !std::isfinite(gap)) {
                return Bad(source, gap_line,
                           absl::StrCat("metadata.gap_seconds = ", base::QuotedValue(v),
                                        ": not a number"));
              }
              if (!(gap > 0)) {
                return Bad(source, gap_line,
                           absl::StrCat("metadata.gap_seconds = ", v, ": must be positive"));
              }
              trace.gap_s = gap;
              have_gap = true;
            } else if (!s.SkipValue()) {
              return Bad(source, s.line(), absl::StrCat("metadata.", mkey, ": bad value"));
            }
            if (s.Consume(',')) continue;
            if (!s.Consume('}')) return Bad(source, s.line(), "metadata: expected , or }");
            break;
          }
        }
      } else if (key == "data") {
        if (!s.Consume('[')) return Bad(source, s.line(), "data: expected an array");
        have_data = true;
        if (!s.Consume(']')) {
          while (true) {
            const absl::string_view v = s.Scalar();
            const int line = s.line();
            int count = 0;
            if (!ParseCount(v, &count)) {
              return Bad(source, line,
                         absl::StrCat("data[", trace.counts.size(), "] = ", base::QuotedValue(v),
                                      ": not a whole number"));
            }
            if (count < 0) {
              return Bad(source, line,
                         absl::StrCat("data[", trace.counts.size(), "] = ", v,
                                      ": a count cannot be negative"));
            }
            trace.counts.push_back(count);
            if (s.Consume(',')) continue;
            if (!s.Consume(']')) return Bad(source, s.line(), "data: expected , or ]");
            break;
          }
        }
      } else if (!s.SkipValue()) {
        return Bad(source, s.line(), absl::StrCat(key, ": bad value"));
      }
      if (s.Consume(',')) continue;
      if (!s.Consume('}')) return Bad(source, s.line(), "expected , or }");
      break;
    }
  }
  if (!have_gap) return Bad(source, gap_line, "metadata.gap_seconds is missing");
  if (!have_data || trace.counts.empty()) {
    return Bad(source, s.line(), "data is empty: no availability to replay");
  }
  return trace;
}

absl::StatusOr<AvailabilityTrace> ParseCsvTrace(absl::string_view text, absl::string_view source,
                                                bool hours) {
  struct Row {
    double t;
    int count;
  };
  std::vector<Row> rows;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    if (fields.size() != 2) {
      return Bad(source, line_no, absl::StrCat("\"", line, "\": expected time,count"));
    }
    const absl::string_view ts = absl::StripAsciiWhitespace(fields[0]);
    const absl::string_view cs = absl::StripAsciiWhitespace(fields[1]);
    double t = 0;
    if (!absl::SimpleAtod(ts, &t) || !std::isfinite(t)) {
      if (rows.empty() && line_no == 1 && !absl::ascii_isdigit(ts.empty() ? 'x' : ts[0])) {
        continue;  // a header
      }
      return Bad(source, line_no, absl::StrCat("time = ", base::QuotedValue(ts), ": not a number"));
    }
    int count = 0;
    if (!ParseCount(cs, &count)) {
      return Bad(source, line_no,
                 absl::StrCat("count = ", base::QuotedValue(cs), ": not a whole number"));
    }
    if (t < 0) return Bad(source, line_no, absl::StrCat("time = ", ts, ": cannot be negative"));
    if (count < 0) {
      return Bad(source, line_no, absl::StrCat("count = ", cs, ": cannot be negative"));
    }
    if (!rows.empty() && t * (hours ? 3600 : 1) < rows.back().t) {
      return Bad(source, line_no,
                 absl::StrCat("time = ", ts, ": goes back (the rows before reach ",
                              rows.back().t / (hours ? 3600 : 1), ")"));
    }
    rows.push_back({t * (hours ? 3600 : 1), count});
  }
  if (rows.empty()) return Bad(source, std::max(line_no, 1), "no time,count rows");
  AvailabilityTrace trace;
  trace.source = std::string(source);
  trace.gap_s = kStepFileGapSeconds;
  const double end = std::max(rows.back().t, kStepFileGapSeconds);
  const size_t ticks = static_cast<size_t>(std::ceil(end / kStepFileGapSeconds));
  trace.counts.assign(ticks, 0);
  // Each tick holds the least count in force during it: the count before the first row counts as
  // the first row's; each row holds from its time to the next row's.
  size_t r = 0;
  for (size_t k = 0; k < ticks; ++k) {
    const double begin = static_cast<double>(k) * kStepFileGapSeconds;
    const double stop = begin + kStepFileGapSeconds;
    while (r + 1 < rows.size() && rows[r + 1].t <= begin) ++r;
    int least = rows[r].count;
    for (size_t q = r + 1; q < rows.size() && rows[q].t < stop; ++q) {
      least = std::min(least, rows[q].count);
    }
    trace.counts[k] = least;
  }
  return trace;
}

absl::StatusOr<AvailabilityTrace> ReadAvailabilityTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the availability trace"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(text);
  if (!stripped.empty() && stripped[0] == '{') return ParseJsonTrace(text, path);
  // Units: hours when the header says so or any time has a fraction.
  bool hours = false;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const absl::string_view time = line.substr(0, line.find(','));
    if (first && !time.empty() && !absl::ascii_isdigit(time[0])) {
      const std::string lower = absl::AsciiStrToLower(time);
      if (absl::StrContains(lower, "hour") || absl::EndsWith(lower, "_h")) hours = true;
    } else if (absl::StrContains(time, '.')) {
      double v = 0;
      if (absl::SimpleAtod(time, &v) && v != std::floor(v)) hours = true;
    }
    first = false;
  }
  return ParseCsvTrace(text, path, hours);
}

absl::StatusOr<std::vector<std::pair<std::string, AvailabilityTrace>>> ReadTypeTraces(
    absl::string_view field, absl::string_view text, absl::string_view key) {
  std::vector<std::pair<std::string, AvailabilityTrace>> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos || eq == 0 || eq + 1 == item.size()) {
      return absl::InvalidArgumentError(absl::StrCat(field, " = \"", text, "\": expected ", key,
                                                     "=FILE,... (\"", item, "\" is not ", key,
                                                     "=FILE)"));
    }
    const std::string type(item.substr(0, eq));
    for (const auto& [seen, trace] : out) {
      if (seen == type) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, " = \"", text, "\": ", type, " is given twice"));
      }
    }
    auto trace = ReadAvailabilityTrace(std::string(item.substr(eq + 1)));
    if (!trace.ok()) {
      return absl::Status(trace.status().code(),
                          absl::StrCat(field, ": ", trace.status().message()));
    }
    out.emplace_back(type, *std::move(trace));
  }
  return out;
}

absl::StatusOr<AvailabilityTrace> JointTrace(
    const std::vector<std::pair<const AvailabilityTrace*, int>>& parts) {
  if (parts.empty()) return absl::InvalidArgumentError("availability: no trace to join");
  AvailabilityTrace joint;
  joint.gap_s = parts[0].first->gap_s;
  double duration = parts[0].first->duration_s();
  std::vector<std::string> sources;
  for (const auto& [trace, n] : parts) {
    joint.gap_s = std::min(joint.gap_s, trace->gap_s);
    duration = std::min(duration, trace->duration_s());
    sources.push_back(trace->source);
  }
  joint.source = absl::StrJoin(sources, "+");
  const size_t ticks = std::max<size_t>(1, static_cast<size_t>(duration / joint.gap_s + 1e-9));
  joint.counts.assign(ticks, 1);
  for (size_t k = 0; k < ticks; ++k) {
    const double t = (static_cast<double>(k) + 0.5) * joint.gap_s;
    for (const auto& [trace, n] : parts) {
      if (trace->CountAt(t) < n) {
        joint.counts[k] = 0;
        break;
      }
    }
  }
  return joint;
}

AvailabilityStats TraceStats(const AvailabilityTrace& trace, double from_s, double until_s,
                             int instances, double changeover_s) {
  AvailabilityStats stats;
  if (trace.counts.empty() || !(until_s > from_s)) return stats;
  const size_t begin = trace.TickAt(from_s);
  size_t end = static_cast<size_t>(std::ceil(until_s / trace.gap_s));
  end = std::min(end, trace.counts.size());
  if (end <= begin) return stats;
  bool up = trace.counts[begin] >= instances;
  size_t run_start = begin;
  auto close = [&](size_t stop, bool last) {
    const double length = static_cast<double>(stop - run_start) * trace.gap_s;
    if (up) {
      ++stats.up_periods;
      stats.available_s += length;
      stats.usable_s += std::max(0.0, length - changeover_s);
    } else {
      ++stats.down_periods;
      stats.longest_down_s = std::max(stats.longest_down_s, length);
      if (last) {
        stats.trailing_down_s = length;
      } else {
        stats.down_lengths_s.push_back(length);
      }
    }
  };
  for (size_t k = begin + 1; k < end; ++k) {
    const bool now_up = trace.counts[k] >= instances;
    if (now_up != up) {
      close(k, false);
      up = now_up;
      run_start = k;
    }
  }
  close(end, true);
  stats.observed_s = static_cast<double>(end - begin) * trace.gap_s;
  return stats;
}

}  // namespace spotdnn::provisioner::deadline
