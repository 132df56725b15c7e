// A local Azure for tests: cpp-httplib on 127.0.0.1 (any free port) answering
//   POST /TENANT/oauth2/v2.0/token   the client-credentials grant (client id and secret checked,
//                                    scope https://management.azure.com/.default), issuing
//                                    expiring tokens;
//   GET  /metadata/identity/oauth2/token   a managed identity's token (Metadata: true);
//   /subscriptions/S/resourceGroups/G/providers/Microsoft.Compute/virtualMachines[/NAME]
//                                    PUT (Spot priority, eviction policy, maxPrice, image,
//                                    osProfile with an SSH key and custom data, a NIC
//                                    configuration on a subnet checked; the same name again is an
//                                    update, not a second VM; a changed osProfile is 409
//                                    PropertyChangeNotAllowed), GET, DELETE (204 when absent),
//                                    list with nextLink pages; creation followed on an
//                                    Azure-AsyncOperation URL; api-version required, a valid
//                                    bearer token required;
//   .../Microsoft.Network/networkInterfaces   the VMs' NICs with their private addresses;
//   GET  /api/retail/prices          the Retail Prices API ($filter on armRegionName and
//                                    armSkuName, NextPageLink pages, no auth).
// Errors are Resource Manager's JSON documents; tests inject them (429 with Retry-After), limit a
// size's capacity, in the location or in one availability zone (SkuNotAvailable at once, or
// AllocationFailed / ZonalAllocationFailed in the operation) and can boot VMs as local processes
// that run their custom data.
#ifndef SPOTDNN_TESTS_LAUNCHER_FAKE_AZURE_H_
#define SPOTDNN_TESTS_LAUNCHER_FAKE_AZURE_H_

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/launcher/fake_vm_host.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace spotdnn::launcher::testing {

class FakeAzure {
 public:
  struct Options {
    std::string tenant = "00000000-0000-0000-0000-00000000a11e";
    std::string client_id = "11111111-2222-3333-4444-555555555555";
    std::string client_secret;
    std::string subscription = "0b1f6471-1bf0-4dda-aec3-cb9272f09590";
    std::string resource_group = "spotdnn-rg";
    std::string location = "eastus";
    // Other locations VMs may be PUT in (location -> the subnet their VMs must join: a subnet of
    // another location is refused as Azure does, InvalidResourceReference).
    std::map<std::string, std::string> other_locations;
    absl::Duration token_lifetime = absl::Hours(1);
    bool private_ips_loopback = false;  // every NIC 127.0.0.1 (VMs booted on this machine)
  };
  struct Injected {
    std::string method;         // empty: any
    std::string path_contains;  // empty: any
    int http_status = 503;
    std::string code = "ServiceUnavailable";
    std::string message = "The service is unavailable.";
    int retry_after_s = 0;      // a Retry-After header when > 0
    bool after_effect = false;  // do the call, then answer with the error
  };
  // How a size without capacity fails.
  enum class CapacityFailure { kSkuNotAvailable, kAllocationFailed, kZonalAllocationFailed };
  struct Vm {
    std::string name;
    nlohmann::json resource;
    int puts = 0;  // PUTs answered for this name
  };

  explicit FakeAzure(Options options);
  ~FakeAzure();
  FakeAzure(const FakeAzure&) = delete;
  FakeAzure& operator=(const FakeAzure&) = delete;

  std::string url() const;         // http://127.0.0.1:PORT: Resource Manager, Entra ID and IMDS
  std::string prices_url() const;  // URL/api/retail/prices

  void Inject(Injected error);
  void SetCapacity(const std::string& vm_size, int count, CapacityFailure how);
  // The same for VMs in availability zone `zone` ("1") of the location, or in a place of another
  // location ("westus2-1"; "westus" for its VMs without a zone).
  void SetZoneCapacity(const std::string& zone, const std::string& vm_size, int count,
                       CapacityFailure how);
  void AddPrice(nlohmann::json item);
  void set_page_size(int n);
  // Creations stay InProgress for one poll (default: Succeeded at the first poll).
  void set_slow_operations(bool slow);
  void ExpireTokens();
  int tokens_issued() const { return tokens_.issued(); }

  void EnableBoot(BootOptions options) { host_.Enable(std::move(options)); }
  // Evicts a VM: the Scheduled Events Preempt now, the VM deleted `notice` later.
  bool Evict(const std::string& name, absl::Duration notice);

  std::vector<Vm> vms() const;
  std::vector<std::string> requests() const;  // "METHOD PATH?QUERY"
  // The zone ("1"; "" for a regional VM) of every VM PUT, in order; in another location its
  // place ("westus2-1", "westus").
  std::vector<std::string> put_zones() const;
  const FakeVmHost& host() const { return host_; }

 private:
  void Handle(const httplib::Request& request, httplib::Response& response);
  void HandleToken(const std::string& tenant, const httplib::Request& request,
                   httplib::Response& response);
  void HandleArm(const httplib::Request& request, httplib::Response& response);
  void HandlePrices(const httplib::Request& request, httplib::Response& response);
  void DeleteVm(const std::string& name);

  Options options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  FakeTokens tokens_;

  mutable std::mutex mu_;
  std::deque<Injected> injected_;
  std::map<std::string, std::pair<int, CapacityFailure>> capacity_;
  std::map<std::pair<std::string, std::string>, std::pair<int, CapacityFailure>> zone_capacity_;
  std::vector<std::string> put_zones_;
  std::vector<nlohmann::json> prices_;
  int page_size_ = 1000;
  bool slow_operations_ = false;
  std::map<std::string, Vm> vms_;
  std::map<std::string, nlohmann::json> nics_;        // by NIC name
  std::map<std::string, nlohmann::json> operations_;  // by id: {status, vm, error}
  std::vector<std::string> requests_;
  int next_id_ = 1;
  FakeVmHost host_;  // last: destroyed first
};

}  // namespace spotdnn::launcher::testing

#endif  // SPOTDNN_TESTS_LAUNCHER_FAKE_AZURE_H_
