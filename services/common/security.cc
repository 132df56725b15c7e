#include "services/common/security.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/support/client_interceptor.h"

namespace spotdnn::services {
namespace {

constexpr absl::string_view kBearerPrefix = "Bearer ";
// Kubernetes and load balancers probe health without credentials; it tells only SERVING or not.
constexpr absl::string_view kHealthServicePrefix = "/grpc.health.v1.Health/";

// The file's contents; INVALID_ARGUMENT naming `flag` and `path` when it cannot be read or is
// empty.
absl::StatusOr<std::string> ReadFileForFlag(absl::string_view flag, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " = \"", path, "\": is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " = \"", path, "\": cannot read: ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " = \"", path, "\": cannot read"));
  }
  if (contents.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " = \"", path, "\": file is empty"));
  }
  return contents.str();
}

// A PEM file holding at least one block whose label ends in `label` ("CERTIFICATE", "PRIVATE
// KEY"), so that a swapped or garbage file fails here, naming its flag, and not as an anonymous
// handshake failure later.
absl::StatusOr<std::string> ReadPem(absl::string_view flag, const std::string& path,
                                    absl::string_view label) {
  auto pem = ReadFileForFlag(flag, path);
  if (!pem.ok()) return pem.status();
  if (!absl::StrContains(*pem, "-----BEGIN ") ||
      !absl::StrContains(*pem, absl::StrCat(label, "-----"))) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " = \"", path, "\": not a PEM file with a ", label));
  }
  return pem;
}

// The token in `path`, without surrounding whitespace; it must be a legal header value.
absl::StatusOr<std::string> ReadToken(absl::string_view flag, const std::string& path) {
  auto contents = ReadFileForFlag(flag, path);
  if (!contents.ok()) return contents.status();
  std::string token(absl::StripAsciiWhitespace(*contents));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " = \"", path, "\": token is empty"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " = \"", path, "\": the token must be printable ASCII without spaces"));
    }
  }
  return token;
}

// Equality whose time depends on the lengths only, not on where the strings first differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

grpc::Status CheckBearerToken(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                              absl::string_view token, std::string* header_name) {
  auto path = metadata.find(":path");
  if (path != metadata.end() &&
      absl::StartsWith(absl::string_view(path->second.data(), path->second.size()),
                       kHealthServicePrefix)) {
    return grpc::Status::OK;
  }
  // Header names are case-insensitive (RFC 9110); gRPC passes an upper-case name through as it
  // came, so "Authorization" and "authorization" are two spellings of one header.
  int found = 0;
  absl::string_view value;
  for (const auto& [key, header_value] : metadata) {
    if (!absl::EqualsIgnoreCase(absl::string_view(key.data(), key.size()), "authorization")) {
      continue;
    }
    if (++found == 1) {
      value = absl::string_view(header_value.data(), header_value.size());
      if (header_name != nullptr) header_name->assign(key.data(), key.size());
    }
  }
  if (found == 0) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing \"authorization: Bearer <token>\" metadata");
  }
  // One header only: with several, another layer (a proxy, a handler) might read a different
  // one than the one checked.
  if (found > 1) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat(found,
                                     " \"authorization\" headers (names compared without regard "
                                     "to case): send exactly one"));
  }
  if (!absl::ConsumePrefix(&value, kBearerPrefix) || !ConstantTimeEquals(value, token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid bearer token");
  }
  return grpc::Status::OK;
}

namespace {

// Checks "authorization: Bearer <token>" on every call but the health service's (CheckBearerToken).
// gRPC runs it for every call on a port with secure (TLS or local) credentials, before the
// handler.
class BearerTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenProcessor(std::string token) : token_(std::move(token)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata* consumed,
                       OutputMetadata*) override {
    std::string name;
    grpc::Status status = CheckBearerToken(metadata, token_, &name);
    if (!status.ok() || name.empty()) return status;
    // The handlers have no use for the secret.
    auto header = metadata.find(name);
    if (header != metadata.end()) {
      consumed->emplace(name, std::string(header->second.data(), header->second.size()));
    }
    return grpc::Status::OK;
  }

 private:
  const std::string token_;
};

// Adds "authorization: Bearer <token>" to every call of a channel.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(std::string header) : header_(std::move(header)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", header_);
    }
    methods->Proceed();
  }

 private:
  const std::string header_;
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : header_(absl::StrCat(kBearerPrefix, token)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(header_);
  }

 private:
  const std::string header_;
};

// A ClientSecurity with its files read.
struct LoadedClientSecurity {
  bool tls = false;
  grpc::SslCredentialsOptions ssl;
  std::string token;
  std::string server_name_override;
};

absl::StatusOr<LoadedClientSecurity> LoadClientSecurity(const ClientSecurity& security) {
  const ClientSecurityNames& names = security.names;
  LoadedClientSecurity loaded;
  loaded.tls = security.tls();
  loaded.server_name_override = security.server_name_override;
  if (security.cert_file.empty() != security.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(names.cert, " and ", names.key, " go together (mutual TLS): ",
                     security.cert_file.empty() ? names.cert : names.key, " is missing"));
  }
  if (!security.ca_file.empty()) {
    auto ca = ReadPem(names.ca, security.ca_file, "CERTIFICATE");
    if (!ca.ok()) return ca.status();
    loaded.ssl.pem_root_certs = *std::move(ca);
  }
  if (!security.cert_file.empty()) {
    auto cert = ReadPem(names.cert, security.cert_file, "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(names.key, security.key_file, "PRIVATE KEY");
    if (!key.ok()) return key.status();
    loaded.ssl.pem_cert_chain = *std::move(cert);
    loaded.ssl.pem_private_key = *std::move(key);
  }
  if (!security.token_file.empty()) {
    auto token = ReadToken(names.token_file, security.token_file);
    if (!token.ok()) return token.status();
    loaded.token = *std::move(token);
  } else {
    loaded.token = security.token;
  }
  return loaded;
}

std::shared_ptr<grpc::Channel> ChannelFor(const std::string& target,
                                          const LoadedClientSecurity& security) {
  grpc::ChannelArguments args = DefaultChannelArguments();
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (security.tls) {
    credentials = grpc::SslCredentials(security.ssl);
    if (!security.server_name_override.empty()) {
      args.SetSslTargetNameOverride(security.server_name_override);
    }
  }
  // A token in clear is only sent where it cannot leave the machine; elsewhere the server
  // answers UNAUTHENTICATED (and it refuses plaintext off loopback anyway, unless --insecure).
  if (security.token.empty() || (!security.tls && !IsLoopbackAddress(target))) {
    return grpc::CreateCustomChannel(target, credentials, args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<BearerTokenInterceptorFactory>(security.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, credentials, args,
                                                                 std::move(interceptors));
}

std::mutex default_client_mu;
std::shared_ptr<const LoadedClientSecurity>& DefaultClientSecurity() {
  static auto* security =
      new std::shared_ptr<const LoadedClientSecurity>(std::make_shared<LoadedClientSecurity>());
  return *security;
}

}  // namespace

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  for (absl::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&address, scheme)) break;
  }
  absl::string_view host = address;
  if (absl::ConsumePrefix(&host, "[")) {
    host = host.substr(0, host.find(']'));
  } else if (size_t colon = host.rfind(':');
             colon != absl::string_view::npos && host.find(':') == colon) {
    host = host.substr(0, colon);
  }
  const std::string name = absl::AsciiStrToLower(host);
  if (name == "localhost" || absl::EndsWith(name, ".localhost")) return true;
  in_addr v4;
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, name.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

absl::Status CheckListenSecurity(absl::string_view listen, const ServerSecurity& security) {
  if (security.tls() || security.insecure || IsLoopbackAddress(listen)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--listen = \"", listen,
      "\" is not a loopback address: serve it with TLS (--tls_cert and --tls_key, and "
      "--tls_client_ca for mutual TLS), or pass --insecure to serve plaintext anyway"));
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    absl::string_view listen, const ServerSecurity& security) {
  if (absl::Status s = CheckListenSecurity(listen, security); !s.ok()) return s;
  std::string token;
  if (!security.auth_token_file.empty()) {
    auto read = ReadToken("--auth_token_file", security.auth_token_file);
    if (!read.ok()) return read.status();
    token = *std::move(read);
  }
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (security.tls()) {
    if (security.tls_cert_file.empty() || security.tls_key_file.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_cert and --tls_key go together: ",
                       security.tls_cert_file.empty() ? "--tls_cert" : "--tls_key", " is missing"));
    }
    auto cert = ReadPem("--tls_cert", security.tls_cert_file, "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem("--tls_key", security.tls_key_file, "PRIVATE KEY");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    if (!security.tls_client_ca_file.empty()) {
      auto ca = ReadPem("--tls_client_ca", security.tls_client_ca_file, "CERTIFICATE");
      if (!ca.ok()) return ca.status();
      options.pem_root_certs = *std::move(ca);
      options.client_certificate_request =
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    options.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
    credentials = grpc::SslServerCredentials(options);
  } else if (!security.tls_client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_client_ca = \"", security.tls_client_ca_file,
                     "\": mutual TLS needs the server's own --tls_cert and --tls_key"));
  } else if (!token.empty()) {
    if (!IsLoopbackAddress(listen)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth_token_file with --listen = \"", listen,
          "\": a bearer token over plaintext off loopback protects nothing; add --tls_cert and "
          "--tls_key"));
    }
    // Local credentials put nothing on the wire (plaintext clients connect as before) but are
    // "secure" to gRPC, so the token processor below runs on every call; they admit loopback
    // (or Unix socket) peers only.
    credentials = grpc::experimental::LocalServerCredentials(
        absl::StartsWith(listen, "unix") ? UDS : LOCAL_TCP);
  } else {
    credentials = grpc::InsecureServerCredentials();
  }
  if (!token.empty()) {
    credentials->SetAuthMetadataProcessor(std::make_shared<BearerTokenProcessor>(token));
  }
  return credentials;
}

absl::Status ValidateServerSecurity(absl::string_view listen, const ServerSecurity& security) {
  return MakeServerCredentials(listen, security).status();
}

grpc::ChannelArguments DefaultChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  return args;
}

absl::Status SetDefaultClientSecurity(const ClientSecurity& security) {
  auto loaded = LoadClientSecurity(security);
  if (!loaded.ok()) return loaded.status();
  auto shared = std::make_shared<const LoadedClientSecurity>(*std::move(loaded));
  std::lock_guard<std::mutex> lock(default_client_mu);
  DefaultClientSecurity() = std::move(shared);
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target) {
  std::shared_ptr<const LoadedClientSecurity> security;
  {
    std::lock_guard<std::mutex> lock(default_client_mu);
    security = DefaultClientSecurity();
  }
  return ChannelFor(target, *security);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const ClientSecurity& security) {
  auto loaded = LoadClientSecurity(security);
  if (!loaded.ok()) return loaded.status();
  return ChannelFor(target, *loaded);
}

}  // namespace spotdnn::services
