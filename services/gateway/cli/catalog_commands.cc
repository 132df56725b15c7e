// `spotdnn catalog refresh`: live spot prices from a cloud into a catalog.
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "provisioner/launcher/aws_provider.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/output.h"

namespace spotdnn::gateway {
namespace {

int CatalogRefresh(const Args& args, const Io& io) {
  const char* cmd = "catalog refresh";
  auto provider_name = args.Required("--provider");
  if (!provider_name.ok()) return ReportError(provider_name.status(), cmd, io);
  if (*provider_name != "aws") {
    return ReportError(absl::InvalidArgumentError(absl::StrCat(
                           "--provider = \"", *provider_name,
                           "\": only aws has a spot price API here (local has no prices)")),
                       cmd, io);
  }
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  const std::string catalog_arg = args.Get("--catalog").value_or("aws-paper-2023");
  auto catalog = registry.ResolveCatalog(catalog_arg);
  if (!catalog.ok()) return ReportError(catalog.status(), cmd, io);
  std::string region = args.Get("--region").value_or("");
  if (region.empty()) region = catalog->region();
  if (region.empty() && std::getenv("AWS_REGION") != nullptr) region = std::getenv("AWS_REGION");
  if (region.empty()) region = "us-east-1";

  auto credentials =
      launcher::ResolveAwsCredentials({.profile = args.Get("--profile").value_or("")});
  if (!credentials.ok()) return ReportError(credentials.status(), cmd, io);
  launcher::AwsProvider::Options options;
  options.region = region;
  options.endpoint_url = args.Get("--endpoint-url").value_or("");
  options.credentials = *credentials;
  auto aws = launcher::AwsProvider::Create(options);
  if (!aws.ok()) return ReportError(aws.status(), cmd, io);

  std::vector<std::string> types;
  for (const pb::InstanceType& t : catalog->instance_types()) types.push_back(t.name());
  const std::string ps_type = catalog->parameter_server().spot_price_per_hour() > 0
                                  ? catalog->parameter_server().instance_type()
                                  : "";
  if (!ps_type.empty()) types.push_back(ps_type);
  auto prices = (*aws)->SpotPrices(types, region);
  if (!prices.ok()) return ReportError(prices.status(), cmd, io);
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
    io.out << "Spot prices for catalog " << catalog->name() << " in " << region
           << " (cheapest zone, Linux/UNIX):\n";
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
       .summary = "refresh a catalog's spot prices from the cloud (catalog refresh --provider aws)",
       .description = "Live prices from a cloud provider into a catalog of the built-in shape."},
      {.name = "catalog refresh",
       .summary = "the current spot price of each of a catalog's types",
       .synopsis = "--provider aws [--catalog C] [--region R] [--endpoint-url URL] [--profile P]\n"
                   "[--out FILE] [--json]",
       .description =
           "Reads the current spot price of each of the catalog's instance types (and its "
           "parameter server\ntype) with EC2 DescribeSpotPriceHistory, takes the cheapest "
           "availability zone, and writes the\ncatalog with those prices to --out (without "
           "--out it only shows them).",
       .flags = {{"--provider", "P", "aws"},
                 {"--catalog", "C",
                  "built-in catalog name or a JSON file (default aws-paper-2023)"},
                 {"--region", "R",
                  "default: the catalog's region, else $AWS_REGION, else us-east-1"},
                 {"--endpoint-url", "URL", "another EC2 endpoint (other partitions, tests)"},
                 {"--profile", "P",
                  "the shared credentials profile (default $AWS_PROFILE, else "
                  "default)"},
                 {"--out", "FILE", "write the refreshed catalog there"}},
       .footer = "Credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN], then\n"
                 "~/.aws/credentials, then the instance role. The IAM policy needs "
                 "ec2:DescribeSpotPriceHistory.",
       .run = CatalogRefresh},
  };
}

}  // namespace spotdnn::gateway
