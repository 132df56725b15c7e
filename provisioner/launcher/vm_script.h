// What the GCE and Azure providers share: the start-up script a VM runs at boot (the SPOTDNN_*
// environment, spotdnn-agent wrapping the job's command), the names derived from a launch's client
// token, and shell quoting. (Retries and their backoff are the transport's: http_retry.h.)
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_VM_SCRIPT_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_VM_SCRIPT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "provisioner/launcher/cloud_provider.h"

namespace spotdnn::launcher {

// How a VM's start-up script starts the agent.
struct VmScriptOptions {
  std::string cloud;  // "gce" or "azure": the agent's --cloud and the script's comment
  // The metadata service the agent polls unless $SPOTDNN_CLOUD_METADATA_URL says otherwise (a
  // test harness that boots the script outside a cloud sets it).
  std::string metadata_url;
  // The agent's command line; %INSTANCE_ID% and %JOB_ID% are replaced (shell-quoted). Empty: no
  // agent.
  std::string agent_command;
};

// The bash script one VM runs at boot (GCE metadata startup-script, Azure custom data run by
// cloud-init): exports InstanceEnvironment(request, index, instance_id) as the AWS user data does
// (SPOTDNN_INDEX and SPOTDNN_INSTANCE_ID known up front, one VM per call) and
// SPOTDNN_METADATA_ENDPOINT, then execs the agent with --metadata_endpoint (and --detector when
// $SPOTDNN_DETECTOR is set) running the command under it (`AGENT ... -- /bin/bash -c COMMAND`),
// or the command alone when there is no agent; output goes to $SPOTDNN_LOG_DIR (default
// /var/log)/spotdnn-ROLE.log.
std::string VmStartupScript(const LaunchRequest& request, int index, const std::string& instance_id,
                            const VmScriptOptions& options);

// `text` single-quoted for bash.
std::string ShellQuote(absl::string_view text);

// The name stem of the VMs one launch makes: "spotdnn-" and 16 hex digits of the SHA-256 of its
// client token (lowercase letters, digits and '-': valid as a GCE instance name and an Azure VM
// name). VM i of the launch is STEM-i.
std::string LaunchNameStem(absl::string_view client_token);

// A UUID-shaped string (8-4-4-4-12 hex, version 5 and RFC 4122 variant bits set) derived from
// `key` by SHA-256: the same key gives the same id (GCE requestId).
std::string DeterministicUuid(absl::string_view key);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_VM_SCRIPT_H_
