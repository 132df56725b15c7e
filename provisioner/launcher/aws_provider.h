// The AWS EC2 spot provider: the EC2 Query API (version 2016-11-15) over the launcher's HTTP
// transport (http_retry.h), signed with SigV4. RunInstances (one-time spot, terminate on
// interruption; on-demand: no market options; ClientToken, job tags, user data that starts the
// worker and spotdnn-agent), DescribeInstances, TerminateInstances and DescribeSpotPriceHistory
// (paged with NextToken). EC2 error codes map to statuses:
//   InsufficientInstanceCapacity, SpotMaxPriceTooLow, ... -> RESOURCE_EXHAUSTED (re-plan without
//   the type); RequestLimitExceeded and 5xx -> retried with backoff and jitter (Retry-After
//   honoured), then UNAVAILABLE; UnauthorizedOperation -> PERMISSION_DENIED naming the ec2:
//   action; AuthFailure and other credential errors -> UNAUTHENTICATED; bad parameters ->
//   INVALID_ARGUMENT.
// With zones configured (a subnet per zone), a launch tries them in order: a zone without
// capacity for the type (InsufficientInstanceCapacity, InsufficientCapacity,
// InsufficientHostCapacity), or one that launched fewer than asked, passes the rest to the next
// zone; RESOURCE_EXHAUSTED only when every zone refused. Each zone's RunInstances has its own
// client token (derived from the launch's), and a launch first looks up what its tokens already
// made, so a repeated launch neither launches twice nor is answered with another zone's result.
// Messages never hold the secret key or the session token.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_AWS_PROVIDER_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_AWS_PROVIDER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/backoff.h"
#include "provisioner/launcher/cloud_provider.h"
#include "provisioner/launcher/http.h"
#include "provisioner/launcher/sigv4.h"

namespace spotdnn::launcher {

// Where to look for credentials (defaults: the real environment and files).
struct CredentialSources {
  // Reads an environment variable (empty when unset). Default: std::getenv.
  std::function<std::string(const std::string&)> getenv;
  // The shared credentials file; empty: $AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials.
  std::string credentials_file;
  // The profile; empty: $AWS_PROFILE, else "default".
  std::string profile;
  // The instance metadata service (IMDSv2) for the instance role; empty:
  // $AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254. Not asked when
  // $AWS_EC2_METADATA_DISABLED is "true".
  std::string metadata_endpoint;
  absl::Duration metadata_timeout = absl::Seconds(1);
};

// Resolves credentials like the AWS CLI: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
// AWS_SESSION_TOKEN, then the profile in the shared credentials file, then the instance role
// from the metadata service. UNAUTHENTICATED (listing what was tried) when none has them.
absl::StatusOr<AwsCredentials> ResolveAwsCredentials(const CredentialSources& sources = {});

// Parses a shared credentials file's text for `profile` (NOT_FOUND when absent, INVALID_ARGUMENT
// when it lacks a key; never quoting the secret).
absl::StatusOr<AwsCredentials> ParseCredentialsFile(const std::string& text,
                                                    const std::string& profile);

// An EC2 error response (<Response><Errors><Error><Code>, <Message>; <RequestID>).
struct Ec2Error {
  std::string code;
  std::string message;
  std::string request_id;
};

// Parses an EC2 error document; NOT_FOUND when the body is not one.
absl::StatusOr<Ec2Error> ParseEc2Error(const std::string& xml);

// Maps an EC2 error of `action` (e.g. "RunInstances") with HTTP status `http_status` to a status.
absl::Status Ec2ErrorToStatus(const std::string& action, long http_status, const Ec2Error& error,
                              const std::string& instance_type = "");

// The EC2 code and message ("InsufficientInstanceCapacity: ...") when `status` is a zone's lack of
// capacity for the type (the launch tries the next zone); nullopt otherwise.
std::optional<std::string> Ec2ZoneCapacity(const absl::Status& status);

// A zone and the subnet a launch there uses.
struct AwsZoneSubnet {
  std::string zone;       // e.g. "us-east-1a"
  std::string subnet_id;  // e.g. "subnet-0abc1234"
};

// Parses the job spec's provider.subnets: "ZONE=SUBNET" items, comma-separated, in the order to
// try. INVALID_ARGUMENT naming `field` and the item: not ZONE=SUBNET, a subnet id that is not
// subnet-HEX, a zone outside `region`, a zone given twice.
absl::StatusOr<std::vector<AwsZoneSubnet>> ParseAwsSubnets(const std::string& text,
                                                           const std::string& region,
                                                           const std::string& field);

// The client token of a launch's RunInstances in `zone` (the launch's own token when `zone` is
// empty): stable across retries, different per zone.
std::string ZoneClientToken(const std::string& token, const std::string& zone);

// True for errors worth retrying (RequestLimitExceeded, throttling, 5xx, transport failures).
bool IsRetryableEc2Error(long http_status, const std::string& code);

// The AWS provider.
class AwsProvider final : public CloudProvider {
 public:
  struct Options {
    std::string region = "us-east-1";
    // Empty: https://ec2.REGION.amazonaws.com (other partitions and tests override it).
    std::string endpoint_url;
    AwsCredentials credentials;
    // RunInstances parameters.
    std::string image_id;   // AMI with the user's framework; required to launch
    std::string subnet_id;  // optional; EC2 picks the zone (no zone fallback)
    // The zones to launch in, in order, each with its subnet (the job spec's provider.subnets).
    // Exclusive with subnet_id.
    std::vector<AwsZoneSubnet> subnets;
    std::vector<std::string> security_group_ids;
    std::string key_name;              // optional SSH key pair
    std::string iam_instance_profile;  // name or ARN; needs iam:PassRole
    std::string max_spot_price;        // empty: up to the on-demand price
    // Ask EC2's spot placement scores (GetSpotPlacementScores, per zone of `subnets`) to order
    // zones of the same price. Needs ec2:GetSpotPlacementScores and
    // ec2:DescribeAvailabilityZones; an answer, or a refusal, is kept for `placement_scores_ttl`.
    bool placement_scores = false;
    absl::Duration placement_scores_ttl = absl::Minutes(10);
    // The instance wrapper the command runs under (`AGENT -- /bin/bash -c COMMAND`);
    // %INSTANCE_ID% and %JOB_ID% are replaced at boot. Empty: the command runs alone.
    std::string agent_command =
        "spotdnn-agent --cloud=aws --instance_id=%INSTANCE_ID% --job_id=%JOB_ID%";
    // Retries of throttled and 5xx calls (the launcher's shared defaults; tests record the
    // waits through retry.sleep).
    base::BackoffOptions retry;
    absl::Duration request_timeout = absl::Seconds(30);
    absl::Time (*now)() = &absl::Now;
  };

  // INVALID_ARGUMENT for a bad endpoint URL, region or subnets (naming the item).
  static absl::StatusOr<std::unique_ptr<AwsProvider>> Create(Options options);

  std::string name() const override { return "aws"; }
  // The zones of provider.subnets, in order.
  std::vector<std::string> ZonesFor(const std::string& instance_type) const override;
  absl::StatusOr<LaunchResult> Launch(const LaunchRequest& request) override;
  absl::StatusOr<std::vector<Instance>> Describe(const std::string& job_id) override;
  absl::Status Terminate(const std::vector<std::string>& instance_ids) override;
  absl::StatusOr<std::vector<SpotPrice>> SpotPrices(const std::vector<std::string>& instance_types,
                                                    const std::string& region) override;
  // With placement_scores and two or more subnets: GetSpotPlacementScores for the type and count
  // in the region, one zone each (SingleAvailabilityZone), its zone ids named through
  // DescribeAvailabilityZones, only the subnets' zones kept. Empty otherwise.
  absl::StatusOr<std::map<std::string, int>> SpotPlacementScores(const std::string& instance_type,
                                                                 int count) override;

  // The user data (before base64) RunInstances sends for `request`.
  std::string UserData(const LaunchRequest& request) const;
  // The endpoint calls go to.
  const std::string& endpoint_url() const { return endpoint_url_; }

 private:
  explicit AwsProvider(Options options, std::string endpoint_url);

  // Signs and POSTs one EC2 action, retrying throttling and 5xx; returns the response body of a
  // 200 or the mapped error.
  absl::StatusOr<std::string> Call(const std::string& action,
                                   std::vector<std::pair<std::string, std::string>> params,
                                   const std::string& region,
                                   const std::string& instance_type = "");
  // One RunInstances call for `request` in `zone` (empty: where EC2 picks) with `token`.
  absl::StatusOr<LaunchResult> RunInstances(const LaunchRequest& request, const std::string& zone,
                                            const std::string& token);
  // Launch over the configured zones, in `zones`' order (see the file comment).
  absl::StatusOr<LaunchResult> LaunchInZones(const LaunchRequest& request,
                                             const std::vector<std::string>& zones);
  // The instances DescribeInstances lists for `filter` (Filter.N.* parameters), all pages; with
  // `client_tokens`, each one's client token beside it.
  absl::StatusOr<std::vector<Instance>> DescribeMatching(
      const std::vector<std::pair<std::string, std::string>>& filter,
      std::vector<std::string>* client_tokens = nullptr);
  // One TerminateInstances call for all of `instance_ids` (EC2 refuses all of them when one is
  // unknown: NOT_FOUND).
  absl::Status TerminateBatch(const std::vector<std::string>& instance_ids);

  Options options_;
  base::BackoffPolicy retry_;
  std::string endpoint_url_;
  std::map<std::string, std::string> zone_names_;  // zone id ("use1-az4") -> name ("us-east-1a")
  // GetSpotPlacementScores itself (SpotPlacementScores keeps its answers).
  absl::StatusOr<std::map<std::string, int>> AskPlacementScores(const std::string& instance_type,
                                                                int count);
  struct Scores {
    absl::Time at;
    std::map<std::string, int> by_zone;
    absl::Status error;  // a refusal, kept as long as an answer
  };
  std::map<std::pair<std::string, int>, Scores> scores_;  // by (type, count)
};

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_AWS_PROVIDER_H_
