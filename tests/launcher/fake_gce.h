// A local Google Cloud for tests: cpp-httplib on 127.0.0.1 (any free port) answering
//   POST /token                          the OAuth 2.0 JWT-bearer grant: checks the assertion's
//                                        RS256 signature with the service account's key, its iss,
//                                        aud, scope, iat and exp, and issues expiring tokens;
//   GET  /computeMetadata/v1/instance/service-accounts/default/{token,email}  (Metadata-Flavor);
//   /compute/v1/projects/P/...           instances insert (requestId, name rules, SPOT
//                                        scheduling, labels, metadata checked; a repeated
//                                        requestId answers with the first operation, an existing
//                                        name 409 alreadyExists), get, delete, aggregatedList
//                                        (filter, maxResults, pageToken), zone operations get and
//                                        wait, machineTypes get; every call needs a valid token;
//   GET  /billing/v1/services/S/skus     the Billing Catalog (X-Goog-Api-Key, pageSize,
//                                        pageToken).
// Errors are Google's JSON error documents; tests inject them, limit zones' capacity (an insert
// then fails in its operation with ZONE_RESOURCE_POOL_EXHAUSTED) and can boot VMs as local
// processes that run their startup-script.
#ifndef SPOTDNN_TESTS_LAUNCHER_FAKE_GCE_H_
#define SPOTDNN_TESTS_LAUNCHER_FAKE_GCE_H_

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

class FakeGce {
 public:
  struct Options {
    std::string project = "spotdnn-test";
    std::string client_email = "launcher@spotdnn-test.iam.gserviceaccount.com";
    std::string public_key_pem;  // verifies assertions (a private key's PEM works too)
    std::string api_key;         // the Billing Catalog's key
    absl::Duration token_lifetime = absl::Hours(1);
    bool private_ips_loopback = false;  // every VM's networkIP 127.0.0.1 (VMs booted here)
  };
  // An error the next matching call gets (Google's JSON error document).
  struct Injected {
    std::string method;         // empty: any
    std::string path_contains;  // empty: any
    int http_status = 503;
    std::string status = "UNAVAILABLE";
    std::string reason = "backendError";
    std::string message = "The service is currently unavailable.";
    bool after_effect = false;  // do the call, then answer with the error
  };
  // One VM.
  struct Vm {
    std::string name;
    std::string zone;
    nlohmann::json resource;
    std::string request_id;
  };

  explicit FakeGce(Options options);
  ~FakeGce();
  FakeGce(const FakeGce&) = delete;
  FakeGce& operator=(const FakeGce&) = delete;

  std::string url() const;          // http://127.0.0.1:PORT (also the metadata server)
  std::string compute_url() const;  // URL/compute/v1
  std::string token_url() const;    // URL/token
  std::string billing_url() const;  // URL/billing/v1

  void Inject(Injected error);
  // The next insert's operation fails with `code` (e.g. QUOTA_EXCEEDED).
  void InjectOperationError(const std::string& code, const std::string& message);
  // How many more VMs of `machine_type` `zone` can start (default unlimited).
  void SetCapacity(const std::string& zone, const std::string& machine_type, int count);
  void SetMachineType(const std::string& name, int cpus, int memory_mb,
                      const std::string& accelerator = "", int accelerator_count = 0);
  void AddSku(nlohmann::json sku);
  void set_page_size(int n);
  // Operations are answered RUNNING first, DONE on the next wait (default: DONE at once).
  void set_slow_operations(bool slow);
  // Every token issued so far is refused from now on.
  void ExpireTokens();
  int tokens_issued() const { return tokens_.issued(); }
  // The assertions the token endpoint refused, with why.
  std::vector<std::string> refused_assertions() const;

  // Boots VMs from now on (see FakeVmHost).
  void EnableBoot(BootOptions options) { host_.Enable(std::move(options)); }
  // Preempts a VM: the notice now, the VM deleted `notice` later (termination action DELETE).
  bool Preempt(const std::string& name, absl::Duration notice);

  std::vector<Vm> vms() const;
  // "METHOD PATH?QUERY" of every request, in order.
  std::vector<std::string> requests() const;
  // The bodies of the inserts that created a VM.
  std::vector<nlohmann::json> inserts() const;
  const FakeVmHost& host() const { return host_; }

 private:
  void Handle(const httplib::Request& request, httplib::Response& response);
  void HandleToken(const httplib::Request& request, httplib::Response& response);
  void HandleCompute(const std::string& path, const httplib::Request& request,
                     httplib::Response& response);
  void HandleSkus(const httplib::Request& request, httplib::Response& response);
  void DeleteVm(const std::string& name);

  Options options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  FakeTokens tokens_;

  mutable std::mutex mu_;
  std::deque<Injected> injected_;
  std::deque<std::pair<std::string, std::string>> operation_errors_;
  std::map<std::pair<std::string, std::string>, int> capacity_;  // (zone, machine type)
  std::map<std::string, nlohmann::json> machine_types_;
  std::vector<nlohmann::json> skus_;
  int page_size_ = 500;
  bool slow_operations_ = false;
  std::map<std::string, Vm> vms_;                     // by name
  std::map<std::string, nlohmann::json> operations_;  // by name
  std::map<std::string, std::string> request_ids_;    // requestId -> operation name
  std::map<std::string, int> operation_polls_;
  std::vector<std::string> requests_;
  std::vector<nlohmann::json> inserts_;
  std::vector<std::string> refused_;
  int next_id_ = 1;
  // Last: destroyed first, so that a pending preemption finishes while the rest is alive.
  FakeVmHost host_;
};

}  // namespace spotdnn::launcher::testing

#endif  // SPOTDNN_TESTS_LAUNCHER_FAKE_GCE_H_
