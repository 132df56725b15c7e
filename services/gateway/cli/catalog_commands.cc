// `spotdnn catalog refresh`: live spot prices from a cloud into a catalog.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "provisioner/launcher/aws_provider.h"
#include "provisioner/launcher/azure_provider.h"
#include "provisioner/launcher/gce_provider.h"
#include "provisioner/launcher/google_auth.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/output.h"

namespace spotdnn::gateway {
namespace {

// Live prices from one cloud, for `spotdnn catalog refresh`.
struct LivePrices {
  std::vector<launcher::SpotPrice> prices;
  std::string region;
  std::string source;  // said in the table's title
};

absl::StatusOr<LivePrices> AwsPrices(const Args& args, const pb::InstanceCatalog& catalog,
                                     const std::vector<std::string>& types) {
  std::string region = args.Get("--region").value_or("");
  if (region.empty()) region = catalog.region();
  if (region.empty() && std::getenv("AWS_REGION") != nullptr) region = std::getenv("AWS_REGION");
  if (region.empty()) region = "us-east-1";
  auto credentials =
      launcher::ResolveAwsCredentials({.profile = args.Get("--profile").value_or("")});
  if (!credentials.ok()) return credentials.status();
  launcher::AwsProvider::Options options;
  options.region = region;
  options.endpoint_url = args.Get("--endpoint-url").value_or("");
  options.credentials = *credentials;
  auto aws = launcher::AwsProvider::Create(options);
  if (!aws.ok()) return aws.status();
  auto prices = (*aws)->SpotPrices(types, region);
  if (!prices.ok()) return prices.status();
  return LivePrices{*std::move(prices), region, "cheapest zone, Linux/UNIX"};
}

absl::StatusOr<LivePrices> GcePrices(const Args& args, const pb::InstanceCatalog& catalog,
                                     const std::vector<std::string>& types) {
  auto project = args.Required("--project");
  if (!project.ok()) return project.status();
  auto zone = args.Required("--zone");
  if (!zone.ok()) return zone.status();
  std::string api_key;
  if (auto file = args.Get("--api-key-file")) {
    std::ifstream in(*file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--api-key-file = \"", *file, "\": cannot read the file"));
    }
    std::getline(in, api_key);
  } else if (std::getenv("GOOGLE_API_KEY") != nullptr) {
    api_key = std::getenv("GOOGLE_API_KEY");
  }
  api_key = std::string(absl::StripAsciiWhitespace(api_key));
  if (api_key.empty()) {
    return absl::InvalidArgumentError(
        "the Cloud Billing Catalog API needs an API key: give --api-key-file FILE or set "
        "GOOGLE_API_KEY");
  }
  auto tokens =
      launcher::GoogleTokenSource({.key_file = args.Get("--credentials-file").value_or("")});
  if (!tokens.ok()) return tokens.status();
  launcher::GceProvider::Options options;
  options.project = *project;
  options.zone = *zone;
  options.endpoint_url = args.Get("--endpoint-url").value_or("");
  options.billing_endpoint_url = args.Get("--billing-url").value_or("");
  options.api_key = api_key;
  options.token_source = *tokens;
  auto gce = launcher::GceProvider::Create(options);
  if (!gce.ok()) return gce.status();
  std::string region = args.Get("--region").value_or(catalog.region());
  if (region.empty()) region = *launcher::GceRegionOf(*zone);
  auto prices = (*gce)->SpotPrices(types, region);
  if (!prices.ok()) return prices.status();
  return LivePrices{*std::move(prices), region, "Spot VMs, Cloud Billing Catalog"};
}

absl::StatusOr<LivePrices> AzurePrices(const Args& args, const pb::InstanceCatalog& catalog,
                                       const std::vector<std::string>& types) {
  std::string region = args.Get("--region").value_or(catalog.region());
  if (region.empty()) {
    return absl::InvalidArgumentError(
        "--region is required for azure when the catalog names none (e.g. eastus)");
  }
  // Prices need no credentials: a provider for the price API alone.
  launcher::AzureProvider::Options options;
  options.subscription = "prices";
  options.resource_group = "prices";
  options.location = region;
  options.prices_url = args.Get("--prices-url").value_or("");
  options.token_source = std::make_shared<launcher::StaticTokenSource>("", "no credentials");
  auto azure = launcher::AzureProvider::Create(options);
  if (!azure.ok()) return azure.status();
  auto prices = (*azure)->SpotPrices(types, region);
  if (!prices.ok()) return prices.status();
  return LivePrices{*std::move(prices), region, "Linux Spot, Azure Retail Prices"};
}

int CatalogRefresh(const Args& args, const Io& io) {
  const char* cmd = "catalog refresh";
  auto provider_name = args.Required("--provider");
  if (!provider_name.ok()) return ReportError(provider_name.status(), cmd, io);
  // The flags each cloud takes beside the common ones.
  static const std::map<std::string, std::vector<std::string>> kFlags = {
      {"aws", {"--endpoint-url", "--profile"}},
      {"gce",
       {"--project", "--zone", "--api-key-file", "--credentials-file", "--endpoint-url",
        "--billing-url"}},
      {"azure", {"--prices-url"}}};
  auto flags = kFlags.find(*provider_name);
  if (flags == kFlags.end()) {
    return ReportError(absl::InvalidArgumentError(
                           absl::StrCat("--provider = \"", *provider_name,
                                        "\": expected aws, gce or azure (local has no prices)")),
                       cmd, io);
  }
  for (const char* flag : {"--endpoint-url", "--profile", "--project", "--zone", "--api-key-file",
                           "--credentials-file", "--billing-url", "--prices-url"}) {
    if (args.Has(flag) &&
        std::find(flags->second.begin(), flags->second.end(), flag) == flags->second.end()) {
      return ReportError(absl::InvalidArgumentError(
                             absl::StrCat(flag, ": not a flag of --provider ", *provider_name)),
                         cmd, io);
    }
  }
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  std::optional<std::string> catalog_arg = args.Get("--catalog");
  if (!catalog_arg && *provider_name != "aws") {
    return ReportError(absl::InvalidArgumentError(absl::StrCat(
                           "--catalog is required for ", *provider_name,
                           ": a catalog file of its instance types (see docs/providers.md)")),
                       cmd, io);
  }
  auto catalog = registry.ResolveCatalog(catalog_arg.value_or("aws-paper-2023"));
  if (!catalog.ok()) return ReportError(catalog.status(), cmd, io);
  if (!catalog->provider().empty() && catalog->provider() != *provider_name) {
    return ReportError(absl::InvalidArgumentError(absl::StrCat(
                           "--catalog = \"", catalog_arg.value_or("aws-paper-2023"), "\" is a ",
                           catalog->provider(), " catalog, not ", *provider_name)),
                       cmd, io);
  }

  std::vector<std::string> types;
  for (const pb::InstanceType& t : catalog->instance_types()) types.push_back(t.name());
  const std::string ps_type = catalog->parameter_server().spot_price_per_hour() > 0
                                  ? catalog->parameter_server().instance_type()
                                  : "";
  if (!ps_type.empty()) types.push_back(ps_type);
  absl::StatusOr<LivePrices> live = *provider_name == "aws"   ? AwsPrices(args, *catalog, types)
                                    : *provider_name == "gce" ? GcePrices(args, *catalog, types)
                                                              : AzurePrices(args, *catalog, types);
  if (!live.ok()) return ReportError(live.status(), cmd, io);
  const std::string region = live->region;
  const std::vector<launcher::SpotPrice>* prices = &live->prices;
  std::map<std::string, double> cheapest = launcher::CheapestPerType(*prices);
  std::map<std::string, std::string> zone;
  for (const launcher::SpotPrice& p : *prices) {
    if (cheapest[p.instance_type] == p.price_per_hour) zone[p.instance_type] = p.availability_zone;
  }

  Table table({"instance type", "old $/h", "new $/h", "zone"});
  table.LeftAlign(3);
  std::vector<std::string> json_rows;
  std::vector<std::string> missing;
  auto update = [&](const std::string& type, double old_price, auto set) {
    auto it = cheapest.find(type);
    if (it == cheapest.end()) {
      missing.push_back(type);
      table.AddRow({type, Fixed(old_price, 4), "(no price)", "-"});
      return;
    }
    set(it->second);
    table.AddRow({type, Fixed(old_price, 4), Fixed(it->second, 4), zone[type]});
    json_rows.push_back(JsonObject()
                            .String("instance_type", type)
                            .Number("old_price_per_hour", old_price)
                            .Number("spot_price_per_hour", it->second)
                            .String("availability_zone", zone[type])
                            .str());
  };
  for (pb::InstanceType& t : *catalog->mutable_instance_types()) {
    update(t.name(), t.spot_price_per_hour(), [&](double p) { t.set_spot_price_per_hour(p); });
    // The zones the catalog lists for the type get their own price where the cloud gives one.
    for (pb::InstanceZone& z : *t.mutable_zones()) {
      for (const launcher::SpotPrice& p : *prices) {
        if (p.instance_type == t.name() && p.availability_zone == z.name()) {
          z.set_spot_price_per_hour(p.price_per_hour);
        }
      }
    }
  }
  // A parameter server priced at 0 is not counted in the catalog's cost model: leave it so.
  if (!ps_type.empty() && catalog->parameter_server().spot_price_per_hour() > 0) {
    pb::ParameterServer* ps = catalog->mutable_parameter_server();
    update(ps_type, ps->spot_price_per_hour(), [&](double p) { ps->set_spot_price_per_hour(p); });
  }
  catalog->set_prices_as_of(absl::FormatTime("%Y-%m-%dT%H:%MZ", absl::Now(), absl::UTCTimeZone()));
  catalog->set_region(region);

  std::string out_file = args.Get("--out").value_or("");
  if (!out_file.empty()) {
    std::ofstream out(out_file, std::ios::trunc);
    out << services::ToJson(*catalog, /*pretty=*/true) << "\n";
    if (!out) {
      return ReportError(absl::InvalidArgumentError(
                             absl::StrCat("--out = \"", out_file, "\": cannot write the file")),
                         cmd, io);
    }
  }
  if (io.json) {
    std::vector<std::string> quoted;
    for (const std::string& m : missing) quoted.push_back(JsonString(m));
    io.out << JsonObject()
                  .String("catalog", catalog->name())
                  .String("region", region)
                  .String("prices_as_of", catalog->prices_as_of())
                  .Raw("prices", "[" + absl::StrJoin(json_rows, ",") + "]")
                  .Raw("missing", "[" + absl::StrJoin(quoted, ",") + "]")
                  .String("out", out_file)
                  .str()
           << "\n";
  } else {
    io.out << "Spot prices for catalog " << catalog->name() << " in " << region << " ("
           << live->source << "):\n";
    table.Print(io.out);
    io.out << (out_file.empty() ? "Not saved (give --out FILE to write the catalog)."
                                : "Wrote " + out_file + ".")
           << "\n";
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> CatalogCommands() {
  return {
      {.name = "catalog",
       .summary = "refresh a catalog's spot prices (catalog refresh --provider aws|gce|azure)",
       .description = "Live prices from a cloud provider into a catalog of the built-in shape."},
      {.name = "catalog refresh",
       .summary = "the current spot price of each of a catalog's types",
       .synopsis = "--provider aws|gce|azure [--catalog C] [--region R] [--out FILE] [--json]\n"
                   "[aws: --endpoint-url URL --profile P]\n"
                   "[gce: --project P --zone Z --api-key-file F --credentials-file F\n"
                   "      --endpoint-url URL --billing-url URL]\n"
                   "[azure: --prices-url URL]",
       .description =
           "Reads the current spot price of each of the catalog's instance types (and its "
           "parameter server\ntype) from the cloud and writes the catalog with those prices to "
           "--out (without --out it only\nshows them). aws: EC2 DescribeSpotPriceHistory "
           "(Linux/UNIX), the cheapest availability zone.\ngce: the Cloud Billing Catalog's "
           "\"Spot Preemptible\" SKUs of the region times each machine type's\nvCPUs, memory "
           "and GPUs (types like n1-standard-8+nvidia-tesla-v100:1 or a2-highgpu-1g).\nazure: "
           "the Retail Prices API's latest Linux Spot price of each VM size in the region.",
       .flags = {{"--provider", "P", "aws, gce or azure"},
                 {"--catalog", "C",
                  "built-in catalog name or a JSON file (default aws-paper-2023 for aws;\n"
                  "required for gce and azure, whose types are theirs)"},
                 {"--region", "R",
                  "default: the catalog's region (aws: else $AWS_REGION, else us-east-1;\n"
                  "gce: else the zone's)"},
                 {"--out", "FILE", "write the refreshed catalog there"},
                 {"--endpoint-url", "URL",
                  "aws, gce: another EC2 or Compute Engine endpoint (other partitions, tests)"},
                 {"--profile", "P",
                  "aws: the shared credentials profile (default $AWS_PROFILE, else default)"},
                 {"--project", "P", "gce: the project whose machine types are read (required)"},
                 {"--zone", "Z",
                  "gce: the zone whose machine types are read, e.g. us-central1-a (required)"},
                 {"--api-key-file", "F",
                  "gce: a file holding the Billing API key (default $GOOGLE_API_KEY)"},
                 {"--credentials-file", "F",
                  "gce: a service account key (default $GOOGLE_APPLICATION_CREDENTIALS, else\n"
                  "the metadata server)"},
                 {"--billing-url", "URL", "gce: another Cloud Billing endpoint (tests)"},
                 {"--prices-url", "URL", "azure: another Retail Prices endpoint (tests)"}},
       .footer =
           "Credentials. aws: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN], then\n"
           "~/.aws/credentials, then the instance role; the IAM policy needs\n"
           "ec2:DescribeSpotPriceHistory. gce: an API key allowed to call the Cloud Billing API,\n"
           "and an account with compute.machineTypes.get (roles/compute.viewer). azure: none.",
       .run = CatalogRefresh},
      {.name = "catalog hazards",
       .summary = "each instance type's revocation model from observed lifetimes",
       .synopsis = "--catalog C (--lifetimes FILE | --from-detector HOST:PORT[,...])\n"
                   "[--censor-at D|none] [--map TYPE=SECTION,...] "
                   "[--unmatched pooled|never|refuse]\n[--out FILE] [--json]",
       .description =
           "Builds each instance type's revocation model and shows it as the probability that an "
           "instance\nlives past 1 h, 6 h and 24 h (95% intervals). Observed lifetimes give a "
           "Kaplan-Meier estimate\n(lifetimes that ended without a revocation count as censored, "
           "not as revocations); a type with no\nlifetimes keeps the catalog's "
           "interruption_rate_per_hour (an exponential model), else it is never\nrevoked. With "
           "--out the catalog is written with each type's lifetimes\n(instance_types[].lifetimes), "
           "which `spotdnn plan --confidence` and `spotdnn simulate` then use.",
       .flags = {{"--catalog", "C", "built-in catalog name or a JSON file"},
                 {"--lifetimes", "FILE",
                  "a lifetime CSV shaped like the GCE preemptible study's: sections\n(\"K80,,\") "
                  "of rows NAME,START,END; a section applies to the types\nwith that GPU type "
                  "(or that name)"},
                 {"--from-detector", "HOST:PORT",
                  "the lifetimes spotdnn-detector recorded: each registered instance\nfrom its "
                  "registration to its revocation notice (revoked) or to its\nunregistration, loss "
                  "or now (censored), per instance type (the gateway\ngives the type when it "
                  "registers); several replicas are merged by instance"},
                 {"--censor-at", "D|none",
                  "with --lifetimes: lifetimes this long or longer ended at the cloud's\nlimit "
                  "(default 24h, GCE preemptible VMs'), not by a revocation"},
                 {"--map", "TYPE=SECTION,...",
                  "use a section for an instance or GPU type the names do not match"},
                 {"--unmatched", "pooled|never|refuse",
                  "a type no section matches and the catalog has no data for gets the\npooled "
                  "lifetimes of the matched sections (default), none, or an error"},
                 {"--out", "FILE", "write the catalog with the lifetimes"}},
       .run = CatalogHazards},
  };
}

}  // namespace spotdnn::gateway
