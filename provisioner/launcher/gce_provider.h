// The Google Compute Engine spot provider: the Compute Engine REST API (compute/v1) over libcurl
// with OAuth 2.0 bearer tokens (google_auth.h), and the Cloud Billing Catalog API for prices.
//
// Instance types are Compute Engine machine types, with attached GPUs after a '+':
// "n1-standard-8+nvidia-tesla-v100:2" (count 1 when left out), "a2-highgpu-1g" (GPUs built in).
//
// Launch inserts one Spot VM per instance (scheduling.provisioningModel SPOT, termination action
// DELETE, no automatic restart; an on-demand launch: STANDARD, no termination action), named
// LaunchNameStem(client token)-i, each insert with a requestId derived from the name, so that a
// retried launch finds (or is answered with) the VMs it made, in any of its zones. The zones tried
// are the request's (LaunchRequest.zones, each one of zone and fallback_zones) or zone then
// fallback_zones, less LaunchRequest.avoid_zones. A zone without capacity
// (ZONE_RESOURCE_POOL_EXHAUSTED and friends) makes the next zone be tried, for this VM and the
// rest (LaunchResult.refused_zones names it); when none has any, the launch reports
// RESOURCE_EXHAUSTED naming every zone ("re-plan without instance type T"), after the VMs that did
// start (a partial launch). Errors:
//   429, rateLimitExceeded and 5xx -> retried with full-jitter backoff, then UNAVAILABLE;
//   401 -> the token is refreshed and the call retried once, then UNAUTHENTICATED;
//   403 -> PERMISSION_DENIED naming the IAM permission; quotaExceeded -> RESOURCE_EXHAUSTED;
//   400 -> INVALID_ARGUMENT; 404 -> NOT_FOUND.
// No message holds a token or the API key.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_GCE_PROVIDER_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_GCE_PROVIDER_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/backoff.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/access_token.h"
#include "provisioner/launcher/cloud_provider.h"
#include "provisioner/launcher/gce_errors.h"

namespace spotdnn::launcher {

// A GCE instance type: a machine type and the GPUs attached to it.
struct GceMachineSpec {
  std::string machine_type;      // e.g. "n1-standard-8"
  std::string accelerator_type;  // e.g. "nvidia-tesla-v100"; empty: none attached
  int accelerator_count = 0;
};

// Parses "MACHINE_TYPE[+ACCELERATOR[:COUNT]]". INVALID_ARGUMENT naming the instance type.
absl::StatusOr<GceMachineSpec> ParseGceInstanceType(const std::string& instance_type);

// The region of a zone ("us-central1-a" -> "us-central1"). INVALID_ARGUMENT for a name that is
// not a zone.
absl::StatusOr<std::string> GceRegionOf(const std::string& zone);

// A label value from free text: lowercase letters, digits, '-' and '_', at most 63 characters.
std::string GceLabelValue(const std::string& text);

// The Compute Engine provider.
class GceProvider final : public CloudProvider {
 public:
  struct Options {
    std::string project;  // required
    std::string zone;     // required: where VMs go first, e.g. "us-central1-a"
    // Zones tried in order when a zone has no capacity (same region, for the prices to hold).
    std::vector<std::string> fallback_zones;
    // Empty: https://compute.googleapis.com/compute/v1 (tests point it at a fake).
    std::string endpoint_url;
    std::shared_ptr<TokenSource> token_source;  // required for every Compute Engine call
    // Boot image, e.g. "projects/my-project/global/images/family/spotdnn"; required to launch.
    std::string image;
    std::string network = "global/networks/default";
    std::string subnetwork;       // e.g. "regions/us-central1/subnetworks/training"; optional
    bool external_ip = true;      // an ephemeral external address (for images pulling packages)
    std::string service_account;  // the VMs' service account email; empty: none
    int boot_disk_gb = 100;
    std::string boot_disk_type = "pd-balanced";
    // The instance wrapper the command runs under (`AGENT -- /bin/bash -c COMMAND`);
    // %INSTANCE_ID% and %JOB_ID% are replaced at boot. Empty: the command runs alone.
    std::string agent_command =
        "spotdnn-agent --cloud=gce --instance_id=%INSTANCE_ID% --job_id=%JOB_ID%";
    // Prices: the Cloud Billing Catalog API (empty: https://cloudbilling.googleapis.com/v1) and
    // its API key (sent in X-Goog-Api-Key, never in a URL).
    std::string billing_endpoint_url;
    std::string api_key;
    // Retries of throttled and 5xx calls (the launcher's shared defaults); its sleep also waits
    // between operation polls.
    base::BackoffOptions retry;
    absl::Duration request_timeout = absl::Seconds(30);
    // How long an insert's operation may take before the launch gives up on it.
    absl::Duration operation_timeout = absl::Minutes(5);
    absl::Time (*now)() = &absl::Now;
  };

  // INVALID_ARGUMENT naming a bad project, zone or endpoint.
  static absl::StatusOr<std::unique_ptr<GceProvider>> Create(Options options);

  std::string name() const override { return "gce"; }
  // zone, then fallback_zones.
  std::vector<std::string> ZonesFor(const std::string&) const override { return Zones(); }
  absl::StatusOr<LaunchResult> Launch(const LaunchRequest& request) override;
  // The job's VMs in every zone (aggregated list by the spotdnn-job label, all pages).
  absl::StatusOr<std::vector<Instance>> Describe(const std::string& job_id) override;
  // Deletes the VMs; ids (instance names) no zone has: NOT_FOUND naming them, after the others
  // were deleted.
  absl::Status Terminate(const std::vector<std::string>& instance_ids) override;
  // Spot price per hour of each type in `region` (empty: the zone's): its machine type's vCPUs and
  // memory (machineTypes.get) times the "Spot Preemptible" core and RAM SKUs of its family, plus
  // its GPUs' SKUs, from the Billing Catalog (all pages). A type whose SKUs are not found is left
  // out. SpotPrice.availability_zone is the region.
  absl::StatusOr<std::vector<SpotPrice>> SpotPrices(const std::vector<std::string>& instance_types,
                                                    const std::string& region) override;

  // The instance resource Launch inserts for VM `index` (role index) named `name` in `zone`.
  absl::StatusOr<nlohmann::json> InstanceResource(const LaunchRequest& request, int index,
                                                  const std::string& name,
                                                  const std::string& zone) const;
  const std::string& endpoint_url() const { return endpoint_url_; }

 private:
  explicit GceProvider(Options options, std::string endpoint_url, std::string billing_url);

  // One Compute Engine call with the bearer token, retrying as described above; the parsed body
  // of a 2xx. `permission` names what a 403 lacks; `instance_type` goes into capacity errors.
  absl::StatusOr<nlohmann::json> Call(const std::string& method, const std::string& url,
                                      const nlohmann::json* body, const std::string& permission,
                                      const std::string& instance_type = "");
  // Waits for a zone operation to be DONE; its error (capacity: RESOURCE_EXHAUSTED) as a status.
  absl::Status WaitForOperation(const std::string& zone, const nlohmann::json& operation,
                                const std::string& instance_type);
  // Every instance matching a list filter (all zones, all pages).
  absl::StatusOr<std::vector<nlohmann::json>> AggregatedList(const std::string& filter);
  Instance ToInstance(const nlohmann::json& resource);
  std::string ZoneUrl(const std::string& zone) const;
  // The configured zones in order: zone, then fallback_zones.
  std::vector<std::string> Zones() const;

  Options options_;
  base::BackoffPolicy retry_;
  std::string endpoint_url_;
  std::string billing_url_;
  std::mutex mu_;
  std::map<std::string, std::string> zone_of_;  // instance name -> zone, as last seen
};

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_GCE_PROVIDER_H_
