// GceProvider::SpotPrices: a machine type's vCPUs and memory times the Cloud Billing Catalog's
// preemptible SKUs of its family, plus its GPUs.
#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "provisioner/launcher/gce_errors.h"
#include "provisioner/launcher/gce_provider.h"
#include "provisioner/launcher/http.h"
#include "provisioner/launcher/http_retry.h"

namespace spotdnn::launcher {
namespace {

using nlohmann::json;

// The Billing Catalog's service id of Compute Engine.
constexpr char kComputeEngineService[] = "6F81-5844-456A";

// A price from a Google Money-like object ({"units": "1", "nanos": 500000000}).
double MoneyOf(const json& money) {
  double units = 0;
  auto u = money.find("units");
  if (u != money.end()) {
    if (u->is_string()) {
      (void)absl::SimpleAtod(u->get<std::string>(), &units);
    } else if (u->is_number()) {
      units = u->get<double>();
    }
  }
  auto n = money.find("nanos");
  const double nanos = n != money.end() && n->is_number() ? n->get<double>() : 0;
  return units + nanos / 1e9;
}

// "Spot Preemptible Nvidia Tesla V100 GPU running in Americas" -> "v100 gpu" (and whether it was
// the "Spot Preemptible" name); empty when it is not a preemptible SKU description.
std::pair<std::string, bool> NormalizedSku(const std::string& description) {
  const std::string lower = absl::AsciiStrToLower(description);
  absl::string_view view = lower;
  const bool spot = absl::ConsumePrefix(&view, "spot preemptible ");
  if (!spot && !absl::ConsumePrefix(&view, "preemptible ")) return {"", false};
  std::string text(view.substr(0, view.find(" running in ")));
  std::vector<std::string> words;
  for (absl::string_view w : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (w == "nvidia" || w == "tesla") continue;
    words.emplace_back(w);
  }
  return {absl::StrJoin(words, " "), spot};
}

std::string AcceleratorKey(const std::string& accelerator_type) {
  std::vector<std::string> words;
  for (absl::string_view w : absl::StrSplit(accelerator_type, '-', absl::SkipEmpty())) {
    if (w == "nvidia" || w == "tesla") continue;
    words.emplace_back(w);
  }
  return absl::StrCat(absl::StrJoin(words, " "), " gpu");
}

// The per-unit price of the tier starting at 0 of a SKU's first pricing info; -1 when absent or
// in another unit than `unit`.
double UnitPrice(const json& sku, const std::string& unit) {
  auto info = sku.find("pricingInfo");
  if (info == sku.end() || !info->is_array() || info->empty()) return -1;
  const json& expression = (*info)[0].value("pricingExpression", json::object());
  if (JsonText(expression, "usageUnit") != unit) return -1;
  auto rates = expression.find("tieredRates");
  if (rates == expression.end() || !rates->is_array()) return -1;
  for (const json& rate : *rates) {
    const double start = rate.value("startUsageAmount", 0.0);
    if (start == 0 && rate.contains("unitPrice")) return MoneyOf(rate["unitPrice"]);
  }
  return -1;
}

}  // namespace

absl::StatusOr<std::vector<SpotPrice>> GceProvider::SpotPrices(
    const std::vector<std::string>& instance_types, const std::string& region_arg) {
  if (instance_types.empty()) return std::vector<SpotPrice>{};
  std::string region = region_arg;
  if (region.empty()) {
    absl::StatusOr<std::string> of_zone = GceRegionOf(options_.zone);
    if (!of_zone.ok()) return of_zone.status();
    region = *of_zone;
  }
  if (options_.api_key.empty()) {
    return absl::InvalidArgumentError(
        "api_key is empty: the Cloud Billing Catalog API needs an API key (--api-key-file FILE "
        "or $GOOGLE_API_KEY)");
  }
  // What each type is made of.
  struct Shape {
    double cpus = 0;
    double memory_gib = 0;
    std::string family;               // "n1"
    std::map<std::string, int> gpus;  // accelerator type -> count
  };
  std::map<std::string, Shape> shapes;
  for (const std::string& type : instance_types) {
    absl::StatusOr<GceMachineSpec> spec = ParseGceInstanceType(type);
    if (!spec.ok()) return spec.status();
    absl::StatusOr<json> machine =
        Call("GET", absl::StrCat(ZoneUrl(options_.zone), "/machineTypes/", spec->machine_type),
             nullptr, "machineTypes.get");
    if (!machine.ok()) return machine.status();
    Shape shape;
    shape.cpus = machine->value("guestCpus", 0.0);
    shape.memory_gib = machine->value("memoryMb", 0.0) / 1024.0;
    shape.family = spec->machine_type.substr(0, spec->machine_type.find('-'));
    for (const json& a : machine->value("accelerators", json::array())) {
      shape.gpus[JsonText(a, "guestAcceleratorType")] += a.value("guestAcceleratorCount", 0);
    }
    if (spec->accelerator_count > 0) shape.gpus[spec->accelerator_type] += spec->accelerator_count;
    if (shape.cpus <= 0 || shape.memory_gib <= 0) {
      return absl::InternalError(absl::StrCat("GCE machineTypes.get ", spec->machine_type,
                                              ": no guestCpus or memoryMb in the answer"));
    }
    shapes[type] = shape;
  }

  // Every preemptible Compute Engine SKU of the region, by normalized description.
  struct Rate {
    double price = -1;
    bool spot = false;  // a "Spot Preemptible" SKU (preferred over a plain "Preemptible" one)
  };
  std::map<std::string, Rate> rates;  // "n1 predefined instance core" -> price per unit
  std::string page_token;
  for (int page = 0;; ++page) {
    if (page >= 1000) return absl::InternalError("Cloud Billing Catalog: more than 1000 pages");
    std::vector<std::pair<std::string, std::string>> query = {{"currencyCode", "USD"},
                                                              {"pageSize", "5000"}};
    if (!page_token.empty()) query.emplace_back("pageToken", page_token);
    const std::string url = absl::StrCat(billing_url_, "/services/", kComputeEngineService,
                                         "/skus?", QueryString(query));
    absl::StatusOr<HttpResponse> response = SendWithRetries(
        {.url = url,
         .headers = {{"X-Goog-Api-Key", options_.api_key}},
         .timeout = options_.request_timeout},
        "Cloud Billing Catalog", retry_, /*signer=*/nullptr,
        [&](const HttpResponse& answer) -> std::optional<HttpFailure> {
          if (answer.status == 200) return std::nullopt;
          GoogleApiError error = ParseGoogleApiError(answer.status, answer.body);
          std::string text =
              absl::StrCat("Cloud Billing Catalog services.skus.list: HTTP ", answer.status, " ",
                           error.status, error.message.empty() ? "" : ": ", error.message);
          if (IsRetryableGoogleError(error)) {
            return HttpFailure{.status = absl::UnavailableError(text), .retryable = true};
          }
          return HttpFailure{.status = BillingErrorToStatus(answer.status, error, text)};
        });
    if (!response.ok()) return response.status();
    json doc = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) {
      return absl::InternalError("Cloud Billing Catalog: the response is not a JSON object");
    }
    for (const json& sku : doc.value("skus", json::array())) {
      const json& category = sku.value("category", json::object());
      if (JsonText(category, "resourceFamily") != "Compute" ||
          JsonText(category, "usageType") != "Preemptible") {
        continue;
      }
      const json& regions = sku.value("serviceRegions", json::array());
      if (std::find(regions.begin(), regions.end(), region) == regions.end()) continue;
      auto [key, spot] = NormalizedSku(JsonText(sku, "description"));
      if (key.empty()) continue;
      const std::string unit = absl::EndsWith(key, " ram") ? "GiBy.h" : "h";
      const double price = UnitPrice(sku, unit);
      if (price < 0) continue;
      Rate& rate = rates[key];
      if (rate.price < 0 || (spot && !rate.spot)) rate = {price, spot};
    }
    page_token = JsonText(doc, "nextPageToken");
    if (page_token.empty()) break;
  }
  auto rate_of = [&](const std::vector<std::string>& keys) {
    for (const std::string& key : keys) {
      auto it = rates.find(key);
      if (it != rates.end()) return it->second.price;
    }
    return -1.0;
  };

  std::vector<SpotPrice> out;
  const absl::Time now = options_.now();
  for (const auto& [type, shape] : shapes) {
    const std::string f = shape.family;
    const double core =
        rate_of({f + " predefined instance core", f + " instance core", f + " amd instance core"});
    const double ram =
        rate_of({f + " predefined instance ram", f + " instance ram", f + " amd instance ram"});
    if (core < 0 || ram < 0) continue;
    double price = shape.cpus * core + shape.memory_gib * ram;
    bool priced = true;
    for (const auto& [accelerator, count] : shape.gpus) {
      const double gpu = rate_of({AcceleratorKey(accelerator)});
      if (gpu < 0) priced = false;
      price += count * gpu;
    }
    if (!priced) continue;
    out.push_back({.instance_type = type,
                   .availability_zone = region,
                   .price_per_hour = price,
                   .timestamp = now});
  }
  return out;
}

}  // namespace spotdnn::launcher
