// The instance wrapper's checkpoint upload: the checkpoint folder uploaded on a thread, every
// interval, and every second once a notice came.
#ifndef SPOTDNN_SERVICES_DETECTOR_CHECKPOINT_UPLOADER_H_
#define SPOTDNN_SERVICES_DETECTOR_CHECKPOINT_UPLOADER_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/time/time.h"
#include "provisioner/launcher/checkpoint_sync.h"

namespace spotdnn::services {

// Uploads the checkpoint folder every interval (every second while `urgent` says so: a notice
// came) on a thread of its own, from construction until Finish or destruction.
class CheckpointUploader {
 public:
  CheckpointUploader(launcher::CheckpointSync* sync, absl::Duration interval,
                     std::function<bool()> urgent);
  ~CheckpointUploader();
  // Stops the thread, then uploads once more (what the command wrote last).
  void Finish();

 private:
  void Stop();
  void Loop();
  void Round(const char* which);

  launcher::CheckpointSync* sync_;
  absl::Duration interval_;
  std::function<bool()> urgent_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_DETECTOR_CHECKPOINT_UPLOADER_H_
