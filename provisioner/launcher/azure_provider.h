// The Azure Spot provider: Azure Resource Manager's REST API (Microsoft.Compute virtualMachines,
// Microsoft.Network networkInterfaces) over libcurl with OAuth 2.0 bearer tokens (azure_auth.h),
// and the public Retail Prices API for prices. Instance types are VM sizes ("Standard_NC6s_v3").
//
// Launch PUTs one Spot VM per instance (priority Spot, eviction policy Delete,
// billingProfile.maxPrice; on-demand: priority Regular without either), the OS disk and NIC
// deleted with it, custom data that cloud-init runs:
// VmStartupScript), named LaunchNameStem(client token)-i and tagged with the job, role, index and
// type. A PUT is idempotent by name: a retried launch finds the VMs it made (a VM that exists is
// not PUT again). Creation is followed on its Azure-AsyncOperation.
//
// Zones: with availability zones configured (zone, then zones), a VM goes to the first zone of the
// request's (LaunchRequest.zones) or the configured order, less LaunchRequest.avoid_zones; zones
// are named LOCATION-ZONE ("eastus-1", as catalogs name them; a bare "1" is taken as this
// location's). A zone that refuses for capacity (SkuNotAvailable, AllocationFailed,
// ZonalAllocationFailed, OverconstrainedAllocationRequest, OverconstrainedZonalAllocationRequest)
// passes this VM and the rest to the next zone (a VM left Failed is deleted first); only when
// every zone refused is the launch short. Other locations (other_places) come after this
// location's zones: each a zone of another location ("westus2-1") or another location without
// zones ("westus"), with the subnet its VMs join there (a virtual network is in one location) and,
// where the image cannot be used there, that location's image. Errors:
//   the capacity codes above, SpotPriceGreaterThanProvidedMaxPrice, QuotaExceeded ->
//   RESOURCE_EXHAUSTED ("re-plan without instance type T"), after the VMs that did start;
//   429 (Retry-After honoured) and 5xx -> retried with full-jitter backoff, then UNAVAILABLE;
//   401 -> the token is refreshed and the call retried once, then UNAUTHENTICATED;
//   AuthorizationFailed -> PERMISSION_DENIED naming the action; 400 -> INVALID_ARGUMENT;
//   404 -> NOT_FOUND (ResourceGroupNotFound: INVALID_ARGUMENT naming resource_group).
// No message holds a token or a secret.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_AZURE_PROVIDER_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_AZURE_PROVIDER_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/backoff.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/access_token.h"
#include "provisioner/launcher/cloud_provider.h"
#include "provisioner/launcher/http.h"

namespace spotdnn::launcher {

// An Azure Resource Manager error ({"error": {"code", "message", "details": [...]}}).
struct ArmError {
  long http_status = 0;
  std::string code;  // the first detail's code when the top one is a wrapper
  std::string message;
};

// A place in another location a launch may go to once this location has no capacity.
struct AzurePlace {
  std::string location;   // "westus2"
  std::string zone;       // "1"; empty: the location without a zone (Azure places the VM)
  std::string subnet_id;  // a subnet of a virtual network in `location`
  // How catalogs and a job's zones name it: "westus2-1", or "westus" without a zone.
  std::string Name() const;
};

// The job spec's azure other_locations: "PLACE=SUBNET_ID" items in order, PLACE a zone of another
// location ("westus2-1") or another location ("westus"). INVALID_ARGUMENT naming `field`, the
// item and why: not PLACE=SUBNET_ID, a place in `location` (its zones are zone and zones), a
// place given twice, a subnet that is not a subnet's resource id.
absl::StatusOr<std::vector<AzurePlace>> ParseAzurePlaces(const std::vector<std::string>& items,
                                                         const std::string& location,
                                                         absl::string_view field);

// Parses an ARM error body (codes of details included: "DeploymentFailed" wraps the real one).
ArmError ParseArmError(long http_status, const std::string& body);

// An OpenSSH "ssh-rsa AAAA..." public key of a fresh RSA key whose private half is thrown away:
// an Azure Linux VM needs a key, and nobody logs in to these VMs.
absl::StatusOr<std::string> EphemeralSshPublicKey();

// The Azure provider.
class AzureProvider final : public CloudProvider {
 public:
  struct Options {
    std::string subscription;    // required: the subscription id
    std::string resource_group;  // required: where the VMs go
    std::string location;        // required: e.g. "eastus"
    std::string endpoint_url;    // empty: https://management.azure.com (tests: a fake)
    std::shared_ptr<TokenSource> token_source;  // required
    // The image: a resource id (/subscriptions/.../images/NAME, a gallery image version) or an
    // URN PUBLISHER:OFFER:SKU:VERSION. Required to launch.
    std::string image;
    // The subnet's resource id (/subscriptions/.../virtualNetworks/V/subnets/S). Required to
    // launch.
    std::string subnet_id;
    std::string admin_username = "spotdnn";
    std::string ssh_public_key;  // empty: an ephemeral key (no SSH login)
    // billingProfile.maxPrice in USD per hour; -1: up to the pay-as-you-go price.
    double max_price = -1;
    std::string identity;  // a user-assigned identity's resource id for the VMs; optional
    std::string zone;      // an availability zone ("1", "2", "3"); empty: regional
    // More availability zones, tried in order after `zone` when one has no capacity ("eastus-2"
    // is taken as "2"). With neither, VMs are regional (Azure places them).
    std::vector<std::string> zones;
    // Places in other locations, tried in order after this location's zones have refused for
    // capacity (ParseAzurePlaces). A job's zones name them to keep to one location.
    std::vector<AzurePlace> other_places;
    // The image to use in another location (location -> image, as `image`) where `image` cannot
    // be (a managed image lives in one location; a marketplace URN or an image version replicated
    // by a compute gallery can be used in every location it is in).
    std::map<std::string, std::string> location_images;
    int os_disk_gb = 0;  // 0: the image's size
    // The instance wrapper the command runs under (see GceProvider::Options::agent_command).
    std::string agent_command =
        "spotdnn-agent --cloud=azure --instance_id=%INSTANCE_ID% --job_id=%JOB_ID%";
    std::string compute_api_version = "2024-03-01";
    std::string network_api_version = "2023-09-01";
    // The Retail Prices API (empty: https://prices.azure.com/api/retail/prices).
    std::string prices_url;
    // Retries of throttled and 5xx calls (the launcher's shared defaults); its sleep also waits
    // between operation polls.
    base::BackoffOptions retry;
    absl::Duration request_timeout = absl::Seconds(30);
    absl::Duration operation_timeout = absl::Minutes(10);
    absl::Duration operation_poll = absl::Seconds(5);  // when the service gives no Retry-After
    absl::Time (*now)() = &absl::Now;
  };

  // INVALID_ARGUMENT naming a bad subscription, resource group, location, zone or endpoint.
  static absl::StatusOr<std::unique_ptr<AzureProvider>> Create(Options options);

  std::string name() const override { return "azure"; }
  // The configured availability zones as LOCATION-ZONE ("eastus-1"), then the other places
  // (AzurePlace::Name), in order; with other places but no zones here, this location first
  // ("eastus").
  std::vector<std::string> ZonesFor(const std::string& instance_type) const override;
  absl::StatusOr<LaunchResult> Launch(const LaunchRequest& request) override;
  // The resource group's VMs tagged with the job (all VMs tagged by spotdnn when `job_id` is
  // empty), all pages, with their NICs' private addresses.
  absl::StatusOr<std::vector<Instance>> Describe(const std::string& job_id) override;
  // Deletes the VMs (their NICs and OS disks go with them); names the group does not have:
  // NOT_FOUND naming them, after the others were deleted.
  absl::Status Terminate(const std::vector<std::string>& instance_ids) override;
  // The Linux Spot pay-as-you-go price per hour of each size in `region` (empty: the location),
  // from the Retail Prices API (one query per size, every NextPageLink followed; the latest
  // effective price). SpotPrice.availability_zone is the region; sizes without a price are
  // left out.
  absl::StatusOr<std::vector<SpotPrice>> SpotPrices(const std::vector<std::string>& instance_types,
                                                    const std::string& region) override;

  // The VM resource Launch PUTs for VM `index` (role index) named `name`, in the first configured
  // zone (Launch sets the zone of each try).
  absl::StatusOr<nlohmann::json> VirtualMachineResource(const LaunchRequest& request, int index,
                                                        const std::string& name,
                                                        const std::string& ssh_key) const;
  const std::string& endpoint_url() const { return endpoint_url_; }

 private:
  AzureProvider(Options options, std::string endpoint_url, std::string prices_url);

  // One ARM call with the bearer token, retrying as described above. The response of a 2xx.
  absl::StatusOr<HttpResponse> Call(const std::string& method, const std::string& url,
                                    const nlohmann::json* body, const std::string& action,
                                    const std::string& instance_type = "");
  // The configured availability zones, bare ("1"), in order: zone, then zones.
  std::vector<std::string> ZoneList() const;
  // Where a VM can go, in order: this location's zones (or the location itself when it has none
  // and other places are configured), then the other places; empty: regional VMs here only.
  std::vector<AzurePlace> Places() const;
  // The VM resource for `place` (its location, zone, subnet and image).
  absl::StatusOr<nlohmann::json> ResourceIn(const AzurePlace& place, const LaunchRequest& request,
                                            int index, const std::string& name,
                                            const std::string& ssh_key) const;
  // Deletes a VM left Failed and waits until it is gone (its name is PUT again, maybe in
  // another zone).
  absl::Status DeleteAndWait(const std::string& name);
  // Follows a PUT's Azure-AsyncOperation until it ends; its failure as a status.
  absl::Status WaitForCreation(const HttpResponse& put, const std::string& name,
                               const std::string& instance_type);
  // A VM resource as an Instance (`private_ips`: NIC id, lowercase -> address).
  Instance ToInstance(const nlohmann::json& vm,
                      const std::map<std::string, std::string>& private_ips) const;
  // NIC id (lowercase) -> private IP address for the resource group (all pages).
  absl::StatusOr<std::map<std::string, std::string>> PrivateAddresses();
  std::string VmUrl(const std::string& name) const;

  Options options_;
  base::BackoffPolicy retry_;
  std::string endpoint_url_;
  std::string prices_url_;
  std::mutex mu_;
  std::string ephemeral_key_;  // the SSH key of VMs launched without one (guarded by mu_)
};

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_AZURE_PROVIDER_H_
