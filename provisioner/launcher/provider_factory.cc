#include "provisioner/launcher/provider_factory.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "provisioner/launcher/aws_provider.h"
#include "provisioner/launcher/azure_auth.h"
#include "provisioner/launcher/azure_provider.h"
#include "provisioner/launcher/gce_provider.h"
#include "provisioner/launcher/google_auth.h"
#include "provisioner/launcher/local_provider.h"
#include "provisioner/launcher/s3_client.h"

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
  LocalProvider::Options options{
      .state_dir = environment.local_state_dir.empty() ? DefaultLocalStateDir()
                                                       : environment.local_state_dir,
      .owner = true,
      .detached = true,
      .capacity = spec.capacity,
      .bin_dir = environment.bin_dir,
      .wrapper = environment.local_wrapper == "none" ? ""
                 : environment.local_wrapper.empty() ? std::string(kDefaultLocalWrapper)
                                                     : environment.local_wrapper};
  if (!environment.metadata_emulator.empty()) {
    options.metadata = std::make_shared<EmulatorMetadataClient>(environment.metadata_emulator);
  }
  for (const auto& [type, path] : spec.capacity_trace) {
    auto trace = ReadCapacityTrace(path);
    if (!trace.ok()) {
      return absl::Status(trace.status().code(), absl::StrCat("provider.capacity_trace.", type,
                                                              ": ", trace.status().message()));
    }
    options.capacity_trace[type] = *std::move(trace);
  }
  options.capacity_trace_time_scale = spec.capacity_trace_time_scale;
  options.capacity_trace_job = environment.job_id;
  options.capacity_trace_resume = environment.resume;
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
  if (!Get(spec, "subnets").empty()) {
    auto subnets = ParseAwsSubnets(Get(spec, "subnets"), options.region, "provider.subnets");
    if (!subnets.ok()) return subnets.status();
    options.subnets = *std::move(subnets);
  }
  options.key_name = Get(spec, "key_name");
  options.iam_instance_profile = Get(spec, "iam_instance_profile");
  options.max_spot_price = Get(spec, "max_spot_price");
  options.placement_scores = Get(spec, "placement_scores") == "true";
  for (absl::string_view g :
       absl::StrSplit(Get(spec, "security_group_ids"), ',', absl::SkipEmpty())) {
    options.security_group_ids.emplace_back(g);
  }
  auto aws = AwsProvider::Create(options);
  if (!aws.ok()) return aws.status();
  return std::unique_ptr<CloudProvider>(std::move(*aws));
}

std::vector<std::string> List(const ProviderSpec& spec, const char* key) {
  std::vector<std::string> out;
  for (absl::string_view v : absl::StrSplit(Get(spec, key), ',', absl::SkipEmpty())) {
    out.emplace_back(absl::StripAsciiWhitespace(v));
  }
  return out;
}

absl::Status BadValue(absl::string_view field, const std::string& key, const std::string& value,
                      absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ".", key, " = \"", value, "\": ", why));
}

// The azure location_images: "LOCATION=IMAGE" items, each a location of `places`.
absl::StatusOr<std::map<std::string, std::string>> AzureLocationImages(
    const ProviderSpec& spec, const std::vector<AzurePlace>& places, absl::string_view field) {
  std::map<std::string, std::string> images;
  const std::vector<std::string> items = List(spec, "location_images");
  for (size_t i = 0; i < items.size(); ++i) {
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".location_images[", i, "] = \"", items[i], "\": ", why));
    };
    const size_t eq = items[i].find('=');
    if (eq == std::string::npos || eq + 1 == items[i].size()) return bad("expected LOCATION=IMAGE");
    const std::string location = items[i].substr(0, eq);
    if (std::none_of(places.begin(), places.end(),
                     [&](const AzurePlace& p) { return p.location == location; })) {
      return bad(absl::StrCat("\"", location, "\" is not a location of other_locations"));
    }
    if (!images.emplace(location, items[i].substr(eq + 1)).second) {
      return bad(absl::StrCat(location, " is given twice"));
    }
  }
  return images;
}

// The values a provider's keys must have beyond being present (field: where the spec has them).
absl::Status ValidateValues(const ProviderSpec& spec, absl::string_view field) {
  auto whole = [&](const char* key, int min, int max) -> absl::Status {
    const std::string value = Get(spec, key);
    int n = 0;
    if (!value.empty() && (!absl::SimpleAtoi(value, &n) || n < min || n > max)) {
      return BadValue(field, key, value,
                      absl::StrCat("expected a whole number from ", min, " to ", max));
    }
    return absl::OkStatus();
  };
  if (spec.name == "gce") {
    for (const std::string& zone : [&] {
           std::vector<std::string> zones = List(spec, "zones");
           zones.insert(zones.begin(), Get(spec, "zone"));
           return zones;
         }()) {
      if (absl::StatusOr<std::string> region = GceRegionOf(zone); !region.ok()) {
        return BadValue(field, "zone", zone, "expected a zone such as us-central1-a");
      }
    }
    const std::string external = Get(spec, "external_ip");
    if (!external.empty() && external != "true" && external != "false") {
      return BadValue(field, "external_ip", external, "expected true or false");
    }
    return whole("boot_disk_gb", 10, 65536);
  }
  if (spec.name == "aws") {
    const std::string scores = Get(spec, "placement_scores");
    if (!scores.empty() && scores != "true" && scores != "false") {
      return BadValue(field, "placement_scores", scores, "expected true or false");
    }
    const std::string subnets = Get(spec, "subnets");
    if (subnets.empty()) return absl::OkStatus();
    if (!Get(spec, "subnet_id").empty()) {
      return BadValue(field, "subnet_id", Get(spec, "subnet_id"),
                      "give subnet_id or subnets (a subnet per zone), not both");
    }
    const std::string region = Get(spec, "region").empty() ? "us-east-1" : Get(spec, "region");
    return ParseAwsSubnets(subnets, region, absl::StrCat(field, ".subnets")).status();
  }
  if (spec.name == "azure") {
    const std::string location = Get(spec, "location");
    std::vector<std::string> zones = List(spec, "zones");
    for (size_t i = 0; i < zones.size(); ++i) {
      absl::string_view bare = zones[i];
      (void)absl::ConsumePrefix(&bare, location + "-");
      if (bare.empty() || bare.size() > 2 ||
          bare.find_first_not_of("0123456789") != absl::string_view::npos) {
        return BadValue(field, "zones", Get(spec, "zones"),
                        absl::StrCat("\"", zones[i], "\" is not an availability zone of ", location,
                                     " (expected 1, 2, 3 or ", location, "-1, ...)"));
      }
    }
    auto places = ParseAzurePlaces(List(spec, "other_locations"), location,
                                   absl::StrCat(field, ".other_locations"));
    if (!places.ok()) return places.status();
    if (auto images = AzureLocationImages(spec, *places, field); !images.ok()) {
      return images.status();
    }
    const std::string price = Get(spec, "max_price");
    double p = 0;
    if (!price.empty() && (!absl::SimpleAtod(price, &p) || (p != -1 && !(p > 0)))) {
      return BadValue(field, "max_price", price, "expected -1 (up to pay-as-you-go) or USD/h > 0");
    }
    return whole("os_disk_gb", 1, 65536);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CloudProvider>> MakeGce(const ProviderSpec& spec,
                                                       const ProviderEnvironment&) {
  auto tokens = GoogleTokenSource({.key_file = Get(spec, "credentials_file")});
  if (!tokens.ok()) return tokens.status();
  GceProvider::Options options;
  options.project = Get(spec, "project");
  options.zone = Get(spec, "zone");
  options.fallback_zones = List(spec, "zones");
  options.endpoint_url = Get(spec, "endpoint_url");
  options.token_source = *tokens;
  options.image = Get(spec, "image");
  if (!Get(spec, "network").empty()) options.network = Get(spec, "network");
  options.subnetwork = Get(spec, "subnetwork");
  options.service_account = Get(spec, "service_account");
  options.external_ip = Get(spec, "external_ip") != "false";
  if (!Get(spec, "boot_disk_gb").empty()) {
    (void)absl::SimpleAtoi(Get(spec, "boot_disk_gb"), &options.boot_disk_gb);
  }
  if (!Get(spec, "boot_disk_type").empty()) options.boot_disk_type = Get(spec, "boot_disk_type");
  auto gce = GceProvider::Create(options);
  if (!gce.ok()) return gce.status();
  return std::unique_ptr<CloudProvider>(std::move(*gce));
}

absl::StatusOr<std::unique_ptr<CloudProvider>> MakeAzure(const ProviderSpec& spec,
                                                         const ProviderEnvironment&) {
  auto tokens = AzureTokenSource({});
  if (!tokens.ok()) return tokens.status();
  AzureProvider::Options options;
  options.subscription = Get(spec, "subscription");
  options.resource_group = Get(spec, "resource_group");
  options.location = Get(spec, "location");
  options.endpoint_url = Get(spec, "endpoint_url");
  options.token_source = *tokens;
  options.image = Get(spec, "image");
  options.subnet_id = Get(spec, "subnet_id");
  if (!Get(spec, "admin_username").empty()) options.admin_username = Get(spec, "admin_username");
  options.ssh_public_key = Get(spec, "ssh_public_key");
  if (!Get(spec, "max_price").empty()) {
    (void)absl::SimpleAtod(Get(spec, "max_price"), &options.max_price);
  }
  options.identity = Get(spec, "identity");
  options.zone = Get(spec, "zone");
  options.zones = List(spec, "zones");
  // Checked by ValidateProviderSpec.
  auto places =
      ParseAzurePlaces(List(spec, "other_locations"), options.location, "provider.other_locations");
  if (!places.ok()) return places.status();
  options.other_places = *std::move(places);
  auto images = AzureLocationImages(spec, options.other_places, "provider");
  if (!images.ok()) return images.status();
  options.location_images = *std::move(images);
  if (!Get(spec, "os_disk_gb").empty()) {
    (void)absl::SimpleAtoi(Get(spec, "os_disk_gb"), &options.os_disk_gb);
  }
  auto azure = AzureProvider::Create(options);
  if (!azure.ok()) return azure.status();
  return std::unique_ptr<CloudProvider>(std::move(*azure));
}

}  // namespace

const std::vector<ProviderKeys>& KnownProviders() {
  static const std::vector<ProviderKeys>* providers = new std::vector<ProviderKeys>{
      {.name = "local", .keys = {"capacity", "capacity_trace", "capacity_trace_time_scale"}},
      {.name = "aws",
       .keys = {"region", "endpoint_url", "image_id", "subnet_id", "subnets", "security_group_ids",
                "key_name", "iam_instance_profile", "max_spot_price", "placement_scores"},
       .required = {"image_id"},
       .required_why = "the AMI with your framework and spotdnn-agent"},
      {.name = "gce",
       .keys = {"project", "zone", "zones", "image", "network", "subnetwork", "service_account",
                "external_ip", "boot_disk_gb", "boot_disk_type", "credentials_file",
                "endpoint_url"},
       .required = {"project", "zone", "image"},
       .required_why = "the project and zone the VMs go to, and the boot image with your "
                       "framework and spotdnn-agent"},
      {.name = "azure",
       .keys = {"subscription", "resource_group", "location", "image", "subnet_id", "max_price",
                "admin_username", "ssh_public_key", "identity", "zone", "zones", "other_locations",
                "location_images", "os_disk_gb", "endpoint_url"},
       .required = {"subscription", "resource_group", "location", "image", "subnet_id"},
       .required_why = "where the VMs go (subscription, resource group, location, subnet) and "
                       "the image with your framework and spotdnn-agent"},
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
  if (!spec.capacity_trace.empty() && !Contains(provider->keys, "capacity_trace")) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".capacity_trace: only the local provider replays a capacity trace"));
  }
  if (!(spec.capacity_trace_time_scale > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".capacity_trace_time_scale = ", spec.capacity_trace_time_scale,
                     ": expected trace seconds per second > 0"));
  }
  for (const std::string& key : provider->required) {
    if (Get(spec, key.c_str()).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".", key, " is required for ",
                                                     spec.name, ": ", provider->required_why));
    }
  }
  return ValidateValues(spec, field);
}

absl::StatusOr<std::unique_ptr<CloudProvider>> MakeProvider(
    const ProviderSpec& spec, const ProviderEnvironment& environment) {
  if (absl::Status s = ValidateProviderSpec(spec); !s.ok()) return s;
  if (spec.name == "aws") return MakeAws(spec, environment);
  if (spec.name == "gce") return MakeGce(spec, environment);
  if (spec.name == "azure") return MakeAzure(spec, environment);
  return MakeLocal(spec, environment);
}

namespace {

// The S3 options a gateway-side checkpoint client starts from: `spec`'s region (else $AWS_REGION,
// else us-east-1) and $SPOTDNN_S3_ENDPOINT; credentials are resolved when first needed.
S3Client::Options CheckpointS3Options(const ProviderSpec& spec) {
  S3Client::Options options;
  options.region = Get(spec, "region");
  if (options.region.empty()) {
    const char* env = std::getenv("AWS_REGION");
    options.region = env != nullptr && *env != '\0' ? env : "us-east-1";
  }
  if (const char* endpoint = std::getenv("SPOTDNN_S3_ENDPOINT"); endpoint != nullptr) {
    options.endpoint_url = endpoint;
  }
  return options;
}

}  // namespace

CheckpointCopier MakeS3CheckpointCopier(const ProviderSpec& spec) {
  const S3Client::Options base = CheckpointS3Options(spec);
  auto credentials = std::make_shared<std::optional<AwsCredentials>>();
  return [base, credentials](const std::string& from_uri, const std::string& from_region,
                             const std::string& to_uri,
                             const std::string& to_region) -> absl::StatusOr<SyncCounts> {
    auto from = ParseS3Uri("checkpoint_uri", from_uri);
    if (!from.ok()) return from.status();
    auto to = ParseS3Uri("checkpoint_uri", to_uri);
    if (!to.ok()) return to.status();
    if (!credentials->has_value()) {
      auto resolved = ResolveAwsCredentials({});
      if (!resolved.ok()) return resolved.status();
      *credentials = *resolved;
    }
    auto store_in = [&](const std::string& region,
                        const std::string& bucket) -> absl::StatusOr<std::unique_ptr<ObjectStore>> {
      S3Client::Options options = base;
      if (!region.empty()) options.region = region;
      options.credentials = **credentials;
      auto client = S3Client::Create(options);
      if (!client.ok()) return client.status();
      return MakeS3ObjectStore(std::shared_ptr<S3Client>(std::move(*client)), bucket);
    };
    auto source = store_in(from_region, from->bucket);
    if (!source.ok()) return source.status();
    auto target = store_in(to_region, to->bucket);
    if (!target.ok()) return target.status();
    return CopyCheckpoint(**source, from->prefix, **target, to->prefix);
  };
}

CheckpointReader MakeS3CheckpointReader(const ProviderSpec& spec) {
  S3Client::Options options = CheckpointS3Options(spec);
  auto client = std::make_shared<std::unique_ptr<S3Client>>();
  return [options, client](const std::string& uri,
                           const std::string& name) mutable -> absl::StatusOr<std::string> {
    auto location = ParseS3Uri("checkpoint_uri", uri);
    if (!location.ok()) return location.status();
    if (*client == nullptr) {
      auto credentials = ResolveAwsCredentials({});
      if (!credentials.ok()) return credentials.status();
      options.credentials = *credentials;
      auto made = S3Client::Create(options);
      if (!made.ok()) return made.status();
      *client = std::move(*made);
    }
    const std::string key = location->prefix.empty() ? name : location->prefix + "/" + name;
    return (*client)->GetObject(location->bucket, key);
  };
}

}  // namespace spotdnn::launcher
