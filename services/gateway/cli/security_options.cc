#include "services/gateway/cli/security_options.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace spotdnn::gateway {
namespace {

// One option: its name, the environment variable that gives its default, and its field.
struct SecurityOption {
  const char* name;
  const char* env;
  std::string services::ClientSecurity::*field;
};

constexpr SecurityOption kOptions[] = {
    {"--tls-ca", "SPOTDNN_TLS_CA", &services::ClientSecurity::ca_file},
    {"--tls-cert", "SPOTDNN_TLS_CERT", &services::ClientSecurity::cert_file},
    {"--tls-key", "SPOTDNN_TLS_KEY", &services::ClientSecurity::key_file},
    {"--token-file", "SPOTDNN_TOKEN_FILE", &services::ClientSecurity::token_file},
};

}  // namespace

absl::StatusOr<services::ClientSecurity> TakeSecurityOptions(std::vector<std::string>& argv) {
  services::ClientSecurity security;
  security.names = {
      .ca = "--tls-ca", .cert = "--tls-cert", .key = "--tls-key", .token_file = "--token-file"};
  bool given[std::size(kOptions)] = {};
  std::vector<std::string> rest;
  for (size_t i = 0; i < argv.size(); ++i) {
    const SecurityOption* option = nullptr;
    std::string value;
    for (const SecurityOption& o : kOptions) {
      if (argv[i] == o.name) {
        if (i + 1 == argv.size()) {
          return absl::InvalidArgumentError(absl::StrCat(o.name, " needs a FILE"));
        }
        option = &o;
        value = argv[++i];
      } else if (absl::StartsWith(argv[i], absl::StrCat(o.name, "="))) {
        option = &o;
        value = argv[i].substr(std::string(o.name).size() + 1);
      }
      if (option != nullptr) break;
    }
    if (option == nullptr) {
      rest.push_back(argv[i]);
      continue;
    }
    bool& seen = given[option - kOptions];
    if (seen) return absl::InvalidArgumentError(absl::StrCat(option->name, " given twice"));
    seen = true;
    security.*(option->field) = value;
  }
  for (size_t k = 0; k < std::size(kOptions); ++k) {
    const char* env = std::getenv(kOptions[k].env);
    if (!given[k] && env != nullptr) security.*(kOptions[k].field) = env;
  }
  argv = std::move(rest);
  return security;
}

absl::Status ApplySecurityOptions(std::vector<std::string>& argv) {
  auto security = TakeSecurityOptions(argv);
  if (!security.ok()) return security.status();
  return services::SetDefaultClientSecurity(*security);
}

}  // namespace spotdnn::gateway
