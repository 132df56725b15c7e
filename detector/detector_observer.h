// What the detector core reports as it works, for whoever counts it (the services layer exports
// it as Prometheus metrics; tests record it). The core itself keeps no metrics registry.
#ifndef SPOTDNN_DETECTOR_DETECTOR_OBSERVER_H_
#define SPOTDNN_DETECTOR_DETECTOR_OBSERVER_H_

#include "absl/time/time.h"
#include "detector/types.h"

namespace spotdnn::detector {

// Told of the detector's polls, recorded notices and lease changes. Called on the detector's
// threads, some under its lock: implementations are thread-safe, quick, and never call back into
// the detector. Every method does nothing unless overridden.
class DetectorObserver {
 public:
  virtual ~DetectorObserver() = default;
  // A round of polling an instance's metadata service ended; `healthy`: every check answered and
  // parsed.
  virtual void OnPoll(Cloud /*cloud*/, bool /*healthy*/) {}
  // A notice (notice, rebalance or maintenance) was recorded as an event, once; `latency` from
  // its being read from the metadata service (by a poll, or by an agent on its clock) to then.
  virtual void OnNotice(Cloud /*cloud*/, EventKind /*kind*/, absl::Duration /*latency*/) {}
  // A shared replica joined (took a lease: `joined`) or lost its lease.
  virtual void OnLeaseChange(bool /*joined*/) {}

  // The observer that does nothing (the default where none is given). Never destroyed.
  static DetectorObserver& None() {
    static DetectorObserver* none = new DetectorObserver();
    return *none;
  }
};

}  // namespace spotdnn::detector

#endif  // SPOTDNN_DETECTOR_DETECTOR_OBSERVER_H_
