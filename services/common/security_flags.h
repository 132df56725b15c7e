// Command-line flags for transport security, defined once for every service main and the agent.
// Services get --tls_cert, --tls_key, --tls_client_ca, --auth_token_file and --insecure
// (ServerSecurityFromFlags); clients (the agent, the simulated worker) get --tls_ca,
// --tls_cert, --tls_key, --tls_server_name and --auth_token_file (ClientSecurityFromFlags). A
// binary has only the flags of the functions it calls.
#ifndef SPOTDNN_SERVICES_COMMON_SECURITY_FLAGS_H_
#define SPOTDNN_SERVICES_COMMON_SECURITY_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "services/common/security.h"

// Shared by servers and clients (security_flags.cc).
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, auth_token_file);

namespace spotdnn::services {

// The server side: --tls_cert, --tls_key, --tls_client_ca, --auth_token_file, --insecure.
ServerSecurity ServerSecurityFromFlags();
// The client side: --tls_ca, --tls_cert, --tls_key, --tls_server_name, --auth_token_file.
ClientSecurity ClientSecurityFromFlags();

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_SECURITY_FLAGS_H_
