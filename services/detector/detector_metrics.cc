#include "services/detector/detector_metrics.h"

#include <string>

#include "base/metrics.h"

namespace spotdnn::services {
namespace {

// The detector's metric families in the process's registry.
struct Families {
  metrics::Family<metrics::Counter>& polls = metrics::DefaultRegistry().Counters(
      "spotdnn_detector_polls_total",
      "rounds of polling an instance's metadata service, by cloud and result (healthy: every "
      "check answered and parsed)",
      {"cloud", "result"});
  metrics::Family<metrics::Counter>& notices = metrics::DefaultRegistry().Counters(
      "spotdnn_detector_notices_total",
      "notices recorded as events (each once), by cloud and kind (notice, rebalance, maintenance)",
      {"cloud", "kind"});
  metrics::Family<metrics::Counter>& lease_changes = metrics::DefaultRegistry().Counters(
      "spotdnn_detector_lease_changes_total",
      "a shared replica joining (taking a lease) or losing its lease", {"change"});
  metrics::Histogram& notice_latency =
      metrics::DefaultRegistry()
          .Histograms("spotdnn_detector_notice_latency_seconds",
                      "from a notice being read from the metadata service (by this replica's "
                      "poll, or by an agent, on its clock) to its event being recorded",
                      {}, {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 5, 10, 30})
          .WithLabels({});
};

Families& Get() {
  static Families* f = new Families();  // lives as long as the process
  return *f;
}

}  // namespace

void DetectorMetrics::OnPoll(detector::Cloud cloud, bool healthy) {
  Get()
      .polls
      .WithLabels({std::string(detector::CloudName(cloud)), healthy ? "healthy" : "unhealthy"})
      .Increment();
}

void DetectorMetrics::OnNotice(detector::Cloud cloud, detector::EventKind kind,
                               absl::Duration latency) {
  Get()
      .notices
      .WithLabels(
          {std::string(detector::CloudName(cloud)), std::string(detector::EventKindName(kind))})
      .Increment();
  Get().notice_latency.Observe(absl::ToDoubleSeconds(latency));
}

void DetectorMetrics::OnLeaseChange(bool joined) {
  Get().lease_changes.WithLabels({joined ? "joined" : "lost"}).Increment();
}

}  // namespace spotdnn::services
