#include "provisioner/launcher/vm_script.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "provisioner/launcher/sigv4.h"

namespace spotdnn::launcher {

std::string ShellQuote(absl::string_view text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "'\\''"}}), "'");
}

std::string VmStartupScript(const LaunchRequest& request, int index, const std::string& instance_id,
                            const VmScriptOptions& options) {
  std::string script =
      absl::StrCat("#!/bin/bash\n# spotdnn launcher: job ", request.job_id, ", ",
                   RoleName(request.role), " ", index, " (", request.instance_type, ") on ",
                   options.cloud, "\n", "MD=\"${SPOTDNN_CLOUD_METADATA_URL:-", options.metadata_url,
                   "}\"\n", "LOGS=\"${SPOTDNN_LOG_DIR:-/var/log}\"\n");
  for (const auto& [name, value] : InstanceEnvironment(request, index, instance_id, "")) {
    absl::StrAppend(&script, "export ", name, "=", ShellQuote(value), "\n");
  }
  absl::StrAppend(&script, "export SPOTDNN_METADATA_ENDPOINT=\"$MD\"\n");
  // The command runs under spotdnn-agent, the instance wrapper (see aws_provider.cc).
  std::string wrapper;
  if (!options.agent_command.empty()) {
    wrapper = absl::StrCat(
        absl::StrReplaceAll(options.agent_command, {{"%INSTANCE_ID%", ShellQuote(instance_id)},
                                                    {"%JOB_ID%", ShellQuote(request.job_id)}}),
        " --metadata_endpoint=\"$MD\" ${SPOTDNN_DETECTOR:+--detector=\"$SPOTDNN_DETECTOR\"} -- ");
  }
  absl::StrAppend(&script, "exec ", wrapper, "/bin/bash -c ", ShellQuote(request.command),
                  " >\"$LOGS/spotdnn-", RoleName(request.role), ".log\" 2>&1\n");
  return script;
}

std::string LaunchNameStem(absl::string_view client_token) {
  return absl::StrCat("spotdnn-", Sha256Hex(client_token).substr(0, 16));
}

std::string DeterministicUuid(absl::string_view key) {
  std::string hex = Sha256Hex(absl::StrCat("spotdnn-request|", key)).substr(0, 32);
  hex[12] = '5';  // version 5 (name-based)
  static constexpr char kVariant[] = "89ab";
  hex[16] = kVariant[std::stoi(hex.substr(16, 1), nullptr, 16) & 3];
  return absl::StrCat(hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-",
                      hex.substr(16, 4), "-", hex.substr(20, 12));
}

}  // namespace spotdnn::launcher
