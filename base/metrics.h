// Prometheus metrics, kept small: counters, gauges and histograms with labels in a registry,
// rendered in the text exposition format (version 0.0.4). Debian 12 has no prometheus-cpp, so the
// format is written here by hand. Thread-safe; recording is a few atomic operations on a metric
// the caller may keep (a labelled child's address never changes). No gRPC and no HTTP here: the
// domain libraries (the detector, the database layer) record into it too; metrics_server.h
// serves it.
#ifndef SPOTDNN_BASE_METRICS_H_
#define SPOTDNN_BASE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace spotdnn::metrics {

// A count that only goes up.
class Counter {
 public:
  void Increment(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into buckets with upper bounds (le), plus their sum and count.
class Histogram {
 public:
  // `bounds`: ascending upper bounds; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts per bound, then the +Inf bucket (== count()).
  std::vector<uint64_t> CumulativeCounts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const { return CumulativeCounts().back(); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bound, then +Inf; not cumulative
  std::atomic<double> sum_{0};
};

// Upper bounds (seconds) for call latencies: 1 ms to 10 s.
std::vector<double> LatencyBuckets();

// One metric name with its label names, and one child per combination of label values.
template <typename Metric>
class Family {
 public:
  using Factory = std::function<std::unique_ptr<Metric>()>;
  Family(std::vector<std::string> label_names, Factory factory)
      : label_names_(std::move(label_names)), factory_(std::move(factory)) {}

  // The child for `values` (one per label name, in order), created on first use.
  Metric& WithLabels(absl::Span<const std::string> values);
  Metric& WithLabels(std::initializer_list<std::string> values) {
    return WithLabels(absl::MakeConstSpan(values.begin(), values.size()));
  }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Calls `fn(values, metric)` for every child, in label-value order.
  void ForEach(const std::function<void(const std::vector<std::string>&, const Metric&)>& fn) const;

 private:
  std::vector<std::string> label_names_;
  Factory factory_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> children_;
};

// The metrics of a process, by name. Asking for a family that exists returns it (several places
// may record into one), so long as the kind and label names agree; a mismatch is a programming
// error and aborts.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Family<Counter>& Counters(const std::string& name, const std::string& help,
                            std::vector<std::string> label_names);
  Family<Gauge>& Gauges(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names);
  Family<Histogram>& Histograms(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names, std::vector<double> bounds);
  // A gauge without labels whose value `read` returns when rendered (it must be thread-safe and
  // not call back into the registry). Setting it again replaces `read`.
  void GaugeFunction(const std::string& name, const std::string& help,
                     std::function<double()> read);

  // The text exposition format 0.0.4: per family, by name, a HELP and a TYPE line and its
  // samples.
  std::string Render() const;

 private:
  struct Entry {
    std::string help;
    std::string type;  // counter, gauge, histogram
    std::vector<std::string> label_names;
    std::unique_ptr<Family<Counter>> counters;
    std::unique_ptr<Family<Gauge>> gauges;
    std::unique_ptr<Family<Histogram>> histograms;
    std::function<double()> read;
  };
  Entry& FindOrAdd(const std::string& name, const std::string& help, const char* type,
                   const std::vector<std::string>& label_names);

  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

// The process's registry, which --metrics_listen serves. Never destroyed.
Registry& DefaultRegistry();

// A label value or HELP text escaped for the text format: backslash and newline (and, for label
// values, the double quote) as \\, \n and \".
std::string EscapeLabelValue(absl::string_view value);
std::string EscapeHelp(absl::string_view help);
// A sample value as the text format writes it: shortest round-trip decimal, +Inf, -Inf, NaN.
std::string FormatValue(double v);

template <typename Metric>
Metric& Family<Metric>::WithLabels(absl::Span<const std::string> values) {
  std::vector<std::string> key(values.begin(), values.end());
  key.resize(label_names_.size());  // missing values are empty, extra ones dropped
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<Metric>& child = children_[std::move(key)];
  if (child == nullptr) child = factory_();
  return *child;
}

template <typename Metric>
void Family<Metric>::ForEach(
    const std::function<void(const std::vector<std::string>&, const Metric&)>& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, metric] : children_) fn(values, *metric);
}

}  // namespace spotdnn::metrics

#endif  // SPOTDNN_BASE_METRICS_H_
