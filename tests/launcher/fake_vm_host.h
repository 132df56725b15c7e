// What the fake clouds share: "booting" a VM as a local process group that runs its start-up
// script (bash) with the environment a test gives, stopping it when the VM is deleted or
// preempted, and the bearer tokens a fake's token endpoint issued.
#ifndef SPOTDNN_TESTS_LAUNCHER_FAKE_VM_HOST_H_
#define SPOTDNN_TESTS_LAUNCHER_FAKE_VM_HOST_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace spotdnn::launcher::testing {

// How a fake cloud boots its VMs (off unless a test enables it).
struct BootOptions {
  std::string bin_dir;  // first on the VM's PATH (spotdnn-agent, spotdnn-sim-worker)
  std::string log_dir;  // each VM logs in LOG_DIR/NAME (SPOTDNN_LOG_DIR)
  // The metadata endpoint a VM's agent polls (SPOTDNN_CLOUD_METADATA_URL), e.g. a metadata
  // emulator's EndpointFor(name).
  std::function<std::string(const std::string& name)> metadata_url;
  // Publishes the cloud's revocation notice for a VM that is preempted at `effective`.
  std::function<void(const std::string& name, absl::Time effective)> publish_notice;
  std::map<std::string, std::string> env;  // more environment (e.g. HOME)
};

// Booted VMs: one process group each. Thread-safe.
class FakeVmHost {
 public:
  FakeVmHost() = default;
  ~FakeVmHost();  // stops every VM still running
  FakeVmHost(const FakeVmHost&) = delete;
  FakeVmHost& operator=(const FakeVmHost&) = delete;

  void Enable(BootOptions options);
  bool enabled() const;
  // Runs `script` with bash for VM `name` (nothing when booting is off). False when it could not
  // be started.
  bool Boot(const std::string& name, const std::string& script);
  // SIGTERM to the VM's group, SIGKILL 2 s later if it still runs (in the background).
  void Stop(const std::string& name);
  // Publishes the notice now and calls `then` (in the background) at `effective`.
  void Preempt(const std::string& name, absl::Duration notice, std::function<void()> then);
  // Names of the VMs booted so far.
  std::vector<std::string> booted() const;

 private:
  mutable std::mutex mu_;
  BootOptions options_;
  bool enabled_ = false;
  std::map<std::string, pid_t> running_;
  std::vector<std::string> booted_;
  std::vector<std::thread> threads_;
};

// Access tokens a fake issued, with their expiry. Thread-safe.
class FakeTokens {
 public:
  // A new token valid for `lifetime`.
  std::string Issue(const std::string& prefix, absl::Duration lifetime);
  // True when `authorization` is "Bearer T" for a T issued, unexpired and not revoked.
  bool Valid(const std::string& authorization) const;
  // Every token issued so far stops being accepted (as if they all expired).
  void ExpireAll();
  int issued() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, absl::Time> tokens_;
  int issued_ = 0;
};

// x-www-form-urlencoded pairs.
std::map<std::string, std::string> ParseFormBody(const std::string& body);

}  // namespace spotdnn::launcher::testing

#endif  // SPOTDNN_TESTS_LAUNCHER_FAKE_VM_HOST_H_
