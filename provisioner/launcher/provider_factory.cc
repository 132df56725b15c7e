#include "provisioner/launcher/provider_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "provisioner/launcher/aws_provider.h"
#include "provisioner/launcher/local_provider.h"

namespace spotdnn::launcher {
namespace {

bool Contains(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

std::string Get(const ProviderSpec& spec, const char* key) {
  auto it = spec.options.find(key);
  return it == spec.options.end() ? std::string() : it->second;
}

absl::StatusOr<std::unique_ptr<CloudProvider>> MakeLocal(const ProviderSpec& spec,
                                                         const ProviderEnvironment& environment) {
  LocalProvider::Options options{.state_dir = environment.local_state_dir.empty()
                                                  ? DefaultLocalStateDir()
                                                  : environment.local_state_dir,
                                 .owner = true,
                                 .detached = true,
                                 .capacity = spec.capacity,
                                 .bin_dir = environment.bin_dir};
  if (!environment.metadata_emulator.empty()) {
    options.metadata = std::make_shared<EmulatorMetadataClient>(environment.metadata_emulator);
  }
  auto local = LocalProvider::Create(options);
  if (!local.ok()) return local.status();
  return std::unique_ptr<CloudProvider>(std::move(*local));
}

absl::StatusOr<std::unique_ptr<CloudProvider>> MakeAws(const ProviderSpec& spec,
                                                       const ProviderEnvironment&) {
  auto credentials = ResolveAwsCredentials({});
  if (!credentials.ok()) return credentials.status();
  AwsProvider::Options options;
  const std::string region = Get(spec, "region");
  if (!region.empty()) options.region = region;
  options.credentials = *credentials;
  options.endpoint_url = Get(spec, "endpoint_url");
  options.image_id = Get(spec, "image_id");
  options.subnet_id = Get(spec, "subnet_id");
  options.key_name = Get(spec, "key_name");
  options.iam_instance_profile = Get(spec, "iam_instance_profile");
  options.max_spot_price = Get(spec, "max_spot_price");
  for (absl::string_view g :
       absl::StrSplit(Get(spec, "security_group_ids"), ',', absl::SkipEmpty())) {
    options.security_group_ids.emplace_back(g);
  }
  auto aws = AwsProvider::Create(options);
  if (!aws.ok()) return aws.status();
  return std::unique_ptr<CloudProvider>(std::move(*aws));
}

}  // namespace

const std::vector<ProviderKeys>& KnownProviders() {
  static const std::vector<ProviderKeys>* providers = new std::vector<ProviderKeys>{
      {.name = "local", .keys = {"capacity"}},
      {.name = "aws",
       .keys = {"region", "endpoint_url", "image_id", "subnet_id", "security_group_ids", "key_name",
                "iam_instance_profile", "max_spot_price"},
       .required = {"image_id"},
       .required_why = "the AMI with your framework and spotdnn-agent"},
  };
  return *providers;
}

absl::Status ValidateProviderSpec(const ProviderSpec& spec, absl::string_view field) {
  const std::vector<ProviderKeys>& known = KnownProviders();
  auto provider = std::find_if(known.begin(), known.end(),
                               [&](const ProviderKeys& p) { return p.name == spec.name; });
  if (provider == known.end()) {
    std::vector<std::string> names;
    for (const ProviderKeys& p : known) names.push_back(p.name);
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".name = \"", spec.name, "\": expected ", absl::StrJoin(names, ", ")));
  }
  for (const auto& [key, value] : spec.options) {
    if (!Contains(provider->keys, key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".", key, ": unknown key for ", spec.name,
                       " (known: ", absl::StrJoin(provider->keys, ", "), ")"));
    }
  }
  if (!spec.capacity.empty() && !Contains(provider->keys, "capacity")) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".capacity: only the local provider takes a capacity"));
  }
  for (const std::string& key : provider->required) {
    if (Get(spec, key.c_str()).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".", key, " is required for ",
                                                     spec.name, ": ", provider->required_why));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CloudProvider>> MakeProvider(
    const ProviderSpec& spec, const ProviderEnvironment& environment) {
  if (absl::Status s = ValidateProviderSpec(spec); !s.ok()) return s;
  if (spec.name == "aws") return MakeAws(spec, environment);
  return MakeLocal(spec, environment);
}

}  // namespace spotdnn::launcher
