// Polling a search's StopCheck (planner.h) cheaply: every `every` calls of Tick(), not every node.
#ifndef SPOTDNN_PROVISIONER_STOP_POLL_H_
#define SPOTDNN_PROVISIONER_STOP_POLL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "provisioner/planner.h"

namespace spotdnn::provisioner {

// Calls a StopCheck on every `every`-th Tick(); once it says stop, every Tick() is false.
class StopPoll {
 public:
  explicit StopPoll(const StopCheck& check, uint32_t every = 4096)
      : check_(check ? &check : nullptr), every_(every) {}

  // False when the search must stop (status() says why).
  bool Tick() {
    if (check_ == nullptr) return true;
    if (!status_.ok()) return false;
    if (++count_ < every_) return true;
    count_ = 0;
    status_ = (*check_)();
    return status_.ok();
  }
  // OK until the check said stop.
  const absl::Status& status() const { return status_; }

 private:
  const StopCheck* check_;
  const uint32_t every_;
  uint32_t count_ = 0;
  absl::Status status_;
};

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_STOP_POLL_H_
