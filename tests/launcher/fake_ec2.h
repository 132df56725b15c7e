// A local EC2-Query-API-compatible endpoint for tests: cpp-httplib on 127.0.0.1 (any free port)
// answering RunInstances, DescribeInstances, TerminateInstances and DescribeSpotPriceHistory with
// the EC2 API's XML shapes, error documents and NextToken pages. It checks every request's SigV4
// signature with the secret it knows, honours ClientToken (a token used again with other parameters
// is IdempotentParameterMismatch), places instances in availability zones (Placement, else the
// subnet's zone, else us-east-1a) with capacity per zone, and lets tests inject errors.
#ifndef SPOTDNN_TESTS_LAUNCHER_FAKE_EC2_H_
#define SPOTDNN_TESTS_LAUNCHER_FAKE_EC2_H_

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "provisioner/launcher/cloud_provider.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace spotdnn::launcher::testing {

// The fake EC2 endpoint.
class FakeEc2 {
 public:
  // An error the next matching call gets.
  struct Injected {
    std::string action;  // empty: any action
    int http_status = 400;
    std::string code;
    std::string message;
    bool after_effect = false;  // run the action first, then answer with the error
    std::string retry_after;    // a Retry-After header to send with it; empty: none
  };
  // One fake instance.
  struct FakeInstance {
    std::string id;
    std::string type;
    std::string state = "running";
    int launch_index = 0;
    std::map<std::string, std::string> tags;
    std::map<std::string, std::string> run_params;  // the RunInstances parameters
    std::string zone;                               // its availability zone
  };

  // Accepts requests signed by `access_key_id` with `secret_access_key` (and `session_token`
  // when not empty).
  FakeEc2(std::string access_key_id, std::string secret_access_key, std::string session_token);
  ~FakeEc2();

  std::string url() const;
  void Inject(Injected error);
  // Instances of `type` the fake can still launch (default unlimited).
  void SetCapacity(const std::string& type, int count);
  // Instances of `type` the fake can still launch in `zone` (default unlimited); 0: the zone
  // answers InsufficientInstanceCapacity.
  void SetZoneCapacity(const std::string& zone, const std::string& type, int count);
  // The zone of a subnet (a launch into it without Placement goes there; with another Placement
  // it is refused). Unknown subnets are in us-east-1a.
  void SetSubnetZone(const std::string& subnet_id, const std::string& zone);
  void AddSpotPrice(const SpotPrice& price);
  // The spot placement score GetSpotPlacementScores gives `zone` for `type` (unset: unscored).
  // DescribeAvailabilityZones lists the zones of SetSubnetZone and of scores; their ids
  // ("use1-az1", ...) are numbered in the reverse order of their names, as an account's mapping
  // need not follow the names.
  void SetPlacementScore(const std::string& zone, const std::string& type, int score);
  void set_page_size(int n);
  // Every instance created so far.
  std::vector<FakeInstance> instances() const;
  // The action of every request, in order (signature failures included).
  std::vector<std::string> actions() const;
  // Parameters of the requests so far.
  std::vector<std::map<std::string, std::string>> requests() const;

 private:
  void Handle(const httplib::Request& request, httplib::Response& response);
  std::string VerifySignature(const httplib::Request& request);  // "" when OK, else an error code

  std::string access_key_id_;
  std::string secret_access_key_;
  std::string session_token_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;

  mutable std::mutex mu_;
  std::deque<Injected> injected_;
  std::map<std::string, int> capacity_;
  std::map<std::pair<std::string, std::string>, int> zone_capacity_;  // (zone, type)
  std::map<std::string, std::string> subnet_zones_;
  std::vector<SpotPrice> prices_;
  std::map<std::pair<std::string, std::string>, int> placement_scores_;  // (zone, type)
  int page_size_ = 1000;
  std::vector<FakeInstance> instances_;
  std::map<std::string, std::vector<std::string>> tokens_;  // ClientToken -> instance ids
  std::vector<std::string> actions_;
  std::vector<std::map<std::string, std::string>> requests_;
  int next_id_ = 1;
};

}  // namespace spotdnn::launcher::testing

#endif  // SPOTDNN_TESTS_LAUNCHER_FAKE_EC2_H_
