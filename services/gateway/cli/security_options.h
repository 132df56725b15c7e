// The CLI's global transport-security options, taken out of argv before a command parses its own
// flags: --tls-ca FILE, --tls-cert FILE, --tls-key FILE and --token-file FILE (also
// --option=FILE), anywhere in argv, with defaults from $SPOTDNN_TLS_CA, $SPOTDNN_TLS_CERT,
// $SPOTDNN_TLS_KEY and $SPOTDNN_TOKEN_FILE.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_SECURITY_OPTIONS_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_SECURITY_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/common/security.h"

namespace spotdnn::gateway {

// Removes the security options from `argv` and returns what they and the environment say.
// INVALID_ARGUMENT for an option without a value or given twice.
absl::StatusOr<services::ClientSecurity> TakeSecurityOptions(std::vector<std::string>& argv);

// TakeSecurityOptions, then makes the result the security of every channel this process opens
// (services::SetDefaultClientSecurity; reset to plaintext when nothing is set). INVALID_ARGUMENT
// naming the option and path for a file that cannot be read.
absl::Status ApplySecurityOptions(std::vector<std::string>& argv);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_SECURITY_OPTIONS_H_
