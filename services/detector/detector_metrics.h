// The detector's metrics in the process's Prometheus registry: a DetectorObserver that counts
// polls, notices and lease changes (spotdnn_detector_*), for spotdnn-detector to inject.
#ifndef SPOTDNN_SERVICES_DETECTOR_DETECTOR_METRICS_H_
#define SPOTDNN_SERVICES_DETECTOR_DETECTOR_METRICS_H_

#include "detector/detector_observer.h"

namespace spotdnn::services {

// Counts what the detector reports in metrics::DefaultRegistry(). Thread-safe. Each family is
// registered when it is first counted, so a process that never polls shows no poll counter.
class DetectorMetrics final : public detector::DetectorObserver {
 public:
  // spotdnn_detector_polls_total{cloud, result=healthy|unhealthy}
  void OnPoll(detector::Cloud cloud, bool healthy) override;
  // spotdnn_detector_notices_total{cloud, kind} and spotdnn_detector_notice_latency_seconds
  void OnNotice(detector::Cloud cloud, detector::EventKind kind, absl::Duration latency) override;
  // spotdnn_detector_lease_changes_total{change=joined|lost}
  void OnLeaseChange(bool joined) override;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_DETECTOR_DETECTOR_METRICS_H_
