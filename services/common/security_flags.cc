// The flags servers and clients share. The side-specific ones are in server_security_flags.cc and
// client_security_flags.cc, so that the agent does not list --insecure and a service not --tls_ca.
#include "services/common/security_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of this process: a service serves TLS with it; a client (the "
          "agent) presents it for mutual TLS. Needs --tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, auth_token_file, "",
          "file holding a bearer token: a service requires \"authorization: Bearer TOKEN\" on "
          "every call (the gRPC health service excepted); a client sends it");
