#include "base/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace spotdnn::metrics {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::Observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

namespace {

// Backslash and newline escaped, and the double quote when `quote`.
std::string Escaped(absl::string_view text, bool quote) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || (quote && c == '"')) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeHelp(absl::string_view help) { return Escaped(help, false); }

std::string EscapeLabelValue(absl::string_view value) { return Escaped(value, true); }

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return std::string(buffer, result.ptr);
}

namespace {

// `{a="x",b="y"}` for the label names and values, with `extra` (already rendered, `le="1"`)
// last; empty when there are none.
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const std::string& extra = "") {
  std::vector<std::string> pairs;
  for (size_t i = 0; i < names.size(); ++i) {
    pairs.push_back(absl::StrCat(names[i], "=\"", EscapeLabelValue(values[i]), "\""));
  }
  if (!extra.empty()) pairs.push_back(extra);
  return pairs.empty() ? "" : absl::StrCat("{", absl::StrJoin(pairs, ","), "}");
}

}  // namespace

Registry::Entry& Registry::FindOrAdd(const std::string& name, const std::string& help,
                                     const char* type,
                                     const std::vector<std::string>& label_names) {
  auto [it, added] = entries_.try_emplace(name);
  Entry& e = it->second;
  if (added) {
    e.help = help;
    e.type = type;
    e.label_names = label_names;
  } else if (e.type != type || e.label_names != label_names) {
    std::fprintf(stderr, "metric %s registered twice with different kinds or labels\n",
                 name.c_str());
    std::abort();
  }
  return e;
}

Family<Counter>& Registry::Counters(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = FindOrAdd(name, help, "counter", label_names);
  if (e.counters == nullptr) {
    e.counters = std::make_unique<Family<Counter>>(std::move(label_names),
                                                   [] { return std::make_unique<Counter>(); });
  }
  return *e.counters;
}

Family<Gauge>& Registry::Gauges(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = FindOrAdd(name, help, "gauge", label_names);
  if (e.read) {
    std::fprintf(stderr, "metric %s is a gauge function\n", name.c_str());
    std::abort();
  }
  if (e.gauges == nullptr) {
    e.gauges = std::make_unique<Family<Gauge>>(std::move(label_names),
                                               [] { return std::make_unique<Gauge>(); });
  }
  return *e.gauges;
}

Family<Histogram>& Registry::Histograms(const std::string& name, const std::string& help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = FindOrAdd(name, help, "histogram", label_names);
  if (e.histograms == nullptr) {
    e.histograms = std::make_unique<Family<Histogram>>(
        std::move(label_names), [bounds] { return std::make_unique<Histogram>(bounds); });
  }
  return *e.histograms;
}

void Registry::GaugeFunction(const std::string& name, const std::string& help,
                             std::function<double()> read) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = FindOrAdd(name, help, "gauge", {});
  if (e.gauges != nullptr) {
    std::fprintf(stderr, "metric %s is a plain gauge\n", name.c_str());
    std::abort();
  }
  e.read = std::move(read);
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, e] : entries_) {
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(e.help), "\n# TYPE ", name, " ", e.type,
                    "\n");
    if (e.read) absl::StrAppend(&out, name, " ", FormatValue(e.read()), "\n");
    if (e.counters != nullptr) {
      e.counters->ForEach([&](const std::vector<std::string>& values, const Counter& c) {
        absl::StrAppend(&out, name, LabelSet(e.label_names, values), " ", c.value(), "\n");
      });
    }
    if (e.gauges != nullptr) {
      e.gauges->ForEach([&](const std::vector<std::string>& values, const Gauge& g) {
        absl::StrAppend(&out, name, LabelSet(e.label_names, values), " ", FormatValue(g.value()),
                        "\n");
      });
    }
    if (e.histograms != nullptr) {
      e.histograms->ForEach([&](const std::vector<std::string>& values, const Histogram& h) {
        // Read the buckets first: the count rendered is then at least their +Inf bucket's.
        const std::vector<uint64_t> cumulative = h.CumulativeCounts();
        for (size_t i = 0; i < cumulative.size(); ++i) {
          const double le =
              i < h.bounds().size() ? h.bounds()[i] : std::numeric_limits<double>::infinity();
          absl::StrAppend(
              &out, name, "_bucket",
              LabelSet(e.label_names, values, absl::StrCat("le=\"", FormatValue(le), "\"")), " ",
              cumulative[i], "\n");
        }
        const std::string labels = LabelSet(e.label_names, values);
        absl::StrAppend(&out, name, "_sum", labels, " ", FormatValue(h.sum()), "\n", name, "_count",
                        labels, " ", cumulative.back(), "\n");
      });
    }
  }
  return out;
}

Registry& DefaultRegistry() {
  static Registry* registry = new Registry();  // lives as long as the process
  return *registry;
}

}  // namespace spotdnn::metrics
