// Which cloud a job launches on: the provider's name and its settings as a job spec gives them,
// checked against what each provider takes, and the CloudProvider built from them. The only place
// outside the providers themselves that knows their names.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_PROVIDER_FACTORY_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_PROVIDER_FACTORY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "provisioner/launcher/checkpoint_sync.h"
#include "provisioner/launcher/cloud_provider.h"

namespace spotdnn::launcher {

// The local instances' wrapper: the agent hands each command its instance's notice and streams
// its samples; it streams no heartbeats (the detector polls the local emulator itself, and an
// agent's exit at a revocation would read as a lost instance).
inline constexpr char kDefaultLocalWrapper[] =
    "spotdnn-agent --cloud=aws --detector=none --orphan_grace=2s --";

// A provider and its settings.
struct ProviderSpec {
  std::string name = "local";
  // The provider's own keys, as strings (a list comma-separated), e.g. aws: region, image_id.
  std::map<std::string, std::string> options;
  // local: the most instances of a type that may run at once (rehearses "no capacity").
  std::map<std::string, int> capacity;
  // local: spot capacity per type replayed from a trace file (capacity_trace.h), and trace
  // seconds per real second (3600: a trace hour a second).
  std::map<std::string, std::string> capacity_trace;
  double capacity_trace_time_scale = 1;
};

// What a provider accepts: its keys, the required ones, and why they are required.
struct ProviderKeys {
  std::string name;
  std::vector<std::string> keys;      // every key it takes (besides "name")
  std::vector<std::string> required;  // keys without which it cannot launch
  std::string required_why;           // said when one is missing
};

// Every provider a job can name, in the order the docs list them.
const std::vector<ProviderKeys>& KnownProviders();

// INVALID_ARGUMENT naming `field`.KEY (or `field`.name) for an unknown provider, a key it does
// not take, a missing required key, a value of the wrong form (gce zones, external_ip,
// boot_disk_gb; azure max_price, os_disk_gb), or a capacity (or capacity trace) given to a
// provider other than local, or a capacity_trace_time_scale that is not > 0.
absl::Status ValidateProviderSpec(const ProviderSpec& spec, absl::string_view field = "provider");

// Where the caller runs, for providers that need it.
struct ProviderEnvironment {
  std::string local_state_dir;    // local: its instance files and logs (DATA_DIR/local)
  std::string metadata_emulator;  // local: the emulator giving instances their metadata endpoints
  std::string bin_dir;            // local: first on the instances' PATH (spotdnn-agent, ...)
  // local: the instance wrapper its commands run under (default: spotdnn-agent, which hands the
  // instance's notice to the command and streams its SPOTDNN_SAMPLE lines to the profiler; the
  // detector polls a local instance's emulated metadata itself). "none": no wrapper.
  std::string local_wrapper;
  // local: the job whose capacity trace is replayed, and whether it is resumed. A new job replays
  // the trace from its start; a resumed one continues from where its first run started it (the
  // time is kept per job in the state dir).
  std::string job_id;
  bool resume = false;
};

// The provider `spec` names, validated, with its credentials resolved from the environment (aws:
// the AWS credential chain; gce: credentials_file, GOOGLE_APPLICATION_CREDENTIALS or the metadata
// server; azure: AZURE_TENANT_ID/AZURE_CLIENT_ID/AZURE_CLIENT_SECRET, AZURE_AUTH_LOCATION or the
// managed identity). Local instances outlive the caller (a job survives its gateway).
absl::StatusOr<std::unique_ptr<CloudProvider>> MakeProvider(const ProviderSpec& spec,
                                                            const ProviderEnvironment& environment);

// Reads file `name` of a checkpoint folder kept at `uri` (s3://BUCKET/PREFIX): its bytes, NOT_FOUND
// when absent.
using CheckpointReader =
    std::function<absl::StatusOr<std::string>(const std::string& uri, const std::string& name)>;

// The reader for a job's s3:// checkpoints, signed with the AWS credential chain (resolved at the
// first read), in `spec`'s region (aws: its "region"; else $AWS_REGION, else us-east-1), at
// $SPOTDNN_S3_ENDPOINT when set (an S3-compatible store, as the instances' agents use).
CheckpointReader MakeS3CheckpointReader(const ProviderSpec& spec);

// The copier for s3:// checkpoints, with the AWS credential chain (resolved at the first copy) and
// $SPOTDNN_S3_ENDPOINT, as MakeS3CheckpointReader.
CheckpointCopier MakeS3CheckpointCopier(const ProviderSpec& spec);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_PROVIDER_FACTORY_H_
