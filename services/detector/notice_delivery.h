// The instance wrapper's notice delivery: a revocation notice the agent read becomes the notice
// file (NoticeFileJson, written atomically) and then a signal to the wrapped command.
#ifndef SPOTDNN_SERVICES_DETECTOR_NOTICE_DELIVERY_H_
#define SPOTDNN_SERVICES_DETECTOR_NOTICE_DELIVERY_H_

#include <mutex>
#include <string>

#include "detector/types.h"
#include "services/detector/instance_wrapper.h"

namespace spotdnn::services {

// Delivers notices to the command: the file first, then the signal. A notice read before the
// command started is signalled as soon as it starts. Thread-safe.
class NoticeDelivery {
 public:
  // `signal` 0: the file only. `cloud` and `instance_id` go into the file.
  NoticeDelivery(std::string file, int signal, std::string cloud, std::string instance_id);

  // A notice the agent read (rebalance and maintenance events are only logged).
  void OnNotice(const detector::Notice& n);
  // The command once started (null: none any more); signalled at once after a notice.
  void SetCommand(WrappedCommand* command);
  // Whether a revocation notice came.
  bool noticed();

 private:
  void SignalLocked();

  const std::string file_;
  const int signal_;
  const std::string cloud_;
  const std::string instance_id_;
  std::mutex mu_;
  bool noticed_ = false;
  WrappedCommand* command_ = nullptr;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_DETECTOR_NOTICE_DELIVERY_H_
