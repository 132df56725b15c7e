// Server-only security flags; see security_flags.h.
#include "absl/flags/flag.h"
#include "services/common/security_flags.h"

ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificate(s): with it, mutual TLS; clients must present a certificate it "
          "signed. Needs --tls_cert and --tls_key");
ABSL_FLAG(bool, insecure, false,
          "allow serving plaintext on a non-loopback --listen address (refused otherwise)");

namespace spotdnn::services {

ServerSecurity ServerSecurityFromFlags() {
  ServerSecurity security;
  security.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  security.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  security.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  security.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  security.insecure = absl::GetFlag(FLAGS_insecure);
  return security;
}

}  // namespace spotdnn::services
