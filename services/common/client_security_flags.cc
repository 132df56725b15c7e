// Client-only security flags; see security_flags.h.
#include "absl/flags/flag.h"
#include "services/common/security_flags.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s) that verify the server; setting it (or --tls_cert) turns TLS on "
          "for outgoing calls");
ABSL_FLAG(std::string, tls_server_name, "",
          "the name to verify in the server's certificate instead of the target's host");

namespace spotdnn::services {

ClientSecurity ClientSecurityFromFlags() {
  ClientSecurity security;
  security.ca_file = absl::GetFlag(FLAGS_tls_ca);
  security.cert_file = absl::GetFlag(FLAGS_tls_cert);
  security.key_file = absl::GetFlag(FLAGS_tls_key);
  security.token_file = absl::GetFlag(FLAGS_auth_token_file);
  security.server_name_override = absl::GetFlag(FLAGS_tls_server_name);
  return security;
}

}  // namespace spotdnn::services
