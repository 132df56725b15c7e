// Transport security shared by every spotdnn server and client: TLS and mutual TLS from PEM files,
// an optional bearer token checked on every call, and the rule that a server does not serve
// plaintext on a non-loopback address unless told to (--insecure).
#ifndef SPOTDNN_SERVICES_COMMON_SECURITY_H_
#define SPOTDNN_SERVICES_COMMON_SECURITY_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace spotdnn::services {

// How a server accepts calls. Every field is a path; empty means "not set".
struct ServerSecurity {
  std::string tls_cert_file;       // --tls_cert: the server's PEM certificate (chain)
  std::string tls_key_file;        // --tls_key: its PEM private key
  std::string tls_client_ca_file;  // --tls_client_ca: mutual TLS; clients need a cert signed by it
  std::string auth_token_file;     // --auth_token_file: calls must send "authorization: Bearer T"
  bool insecure = false;           // --insecure: plaintext is allowed on a non-loopback address

  bool tls() const { return !tls_cert_file.empty() || !tls_key_file.empty(); }
};

// The flag names a client's errors use (services and the agent use absl flags; the CLI its own).
struct ClientSecurityNames {
  std::string ca = "--tls_ca";
  std::string cert = "--tls_cert";
  std::string key = "--tls_key";
  std::string token_file = "--auth_token_file";
};

// How a client calls. TLS is on when any of the three TLS files is set; without `ca_file` the
// system's roots verify the server. `cert_file` and `key_file` (mutual TLS) go together.
struct ClientSecurity {
  std::string ca_file;               // PEM roots that verify the server's certificate
  std::string cert_file;             // the client's PEM certificate, for mutual TLS
  std::string key_file;              // its PEM private key
  std::string token_file;            // a file holding the bearer token sent on every call
  std::string token;                 // or the token itself (token_file wins when both are set)
  std::string server_name_override;  // the name to verify instead of the target's host
  ClientSecurityNames names;

  bool tls() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

// Whether a "host:port" (or "[v6]:port", "unix:path", "dns:///host:port") names this machine
// only: 127.0.0.0/8, ::1, localhost or a Unix socket. ":port", 0.0.0.0 and :: are not.
bool IsLoopbackAddress(absl::string_view address);

// OK when `listen` is loopback, TLS is configured or `insecure` is set; otherwise
// INVALID_ARGUMENT naming the address and the flags that would allow it.
absl::Status CheckListenSecurity(absl::string_view listen, const ServerSecurity& security);

// Reads the files of `security` and builds the credentials for a port on `listen`, after
// CheckListenSecurity. With a token, every call but the gRPC health service's must carry it in
// exactly one "authorization" header (UNAUTHENTICATED otherwise); on plaintext this needs a
// loopback `listen`, since a token over a network in clear protects nothing. INVALID_ARGUMENT
// naming the flag and path for a missing, unreadable or malformed file, or a half-configured pair.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    absl::string_view listen, const ServerSecurity& security);

// The bearer-token check a server with --auth_token_file runs on every call's metadata (gRPC's
// InputMetadata): OK for the health service's calls; otherwise exactly one "authorization" header,
// its name compared without regard to case ("Authorization" and "authorization" count as two),
// holding "Bearer <token>". UNAUTHENTICATED otherwise. `header_name`, when given, receives the
// header's name as sent (empty for a health call).
grpc::Status CheckBearerToken(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                              absl::string_view token, std::string* header_name = nullptr);

// MakeServerCredentials' checks alone, for a main to fail (exit 2) before it opens its state.
absl::Status ValidateServerSecurity(absl::string_view listen, const ServerSecurity& security);

// Reads the files of `security` and makes it what MakeChannel(target) uses from now on, in this
// process. INVALID_ARGUMENT naming the flag and path for a bad file; the default is then
// unchanged.
absl::Status SetDefaultClientSecurity(const ClientSecurity& security);

// Largest message a spotdnn server or client accepts (a PredictBatch of many clusters is big).
inline constexpr int kMaxMessageBytes = 256 << 20;

// Channel arguments every spotdnn client uses (message size limits).
grpc::ChannelArguments DefaultChannelArguments();
// A channel to `target` ("host:port") with DefaultChannelArguments() and the process's default
// client security (plaintext without a token until SetDefaultClientSecurity).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);
// A channel to `target` with `security` instead of the default. The token goes over TLS, or in
// clear to a loopback target only (never over a network in clear).
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const ClientSecurity& security);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_SECURITY_H_
