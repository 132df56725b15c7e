// The elastic launcher around a synchronous (all-reduce) job's script: on every instance the
// command the provider starts (under spotdnn-agent, as any worker command) is PyTorch's own
// elastic agent, `torchrun` (or `python3 -m torch.distributed.run` where torchrun is not
// installed), with the c10d rendezvous at the job's store on the control side
// (`--rdzv_conf=is_host=false`: the instances only connect to it, none of them hosts it), so that
// a revoked instance takes no part of the job's state with it.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_ELASTIC_LAUNCH_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_ELASTIC_LAUNCH_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "provisioner/launcher/cluster_launcher.h"

namespace spotdnn::launcher {

// What one instance's elastic launcher is started with.
struct ElasticLaunchOptions {
  std::string job_id;      // --rdzv_id: the instances of one job meet under it
  std::string rendezvous;  // --rdzv_endpoint: HOST:PORT of the job's c10d store
  int min_instances = 1;   // --nnodes=MIN:MAX (MIN >= 1, MIN <= MAX)
  int max_instances = 1;
  // --nproc_per_node: the instance type's GPUs (1 on a CPU type); 0: the instance's
  // $SPOTDNN_PROCS_PER_INSTANCE (1 when unset), so one command serves groups of several types.
  int procs_per_instance = 0;
  int max_restarts = 3;  // --max_restarts: group restarts torchrun makes before failing
  // How long a rendezvous waits for MIN instances before torchrun gives up (join_timeout);
  // torch's default is 600.
  int join_timeout_s = 600;
  // How long a rendezvous that has MIN instances waits for more before it closes
  // (last_call_timeout; torch's default is 30): after a revocation the survivors go on this soon.
  int last_call_timeout_s = 5;
  // The user's command: `python3 train.py --epochs 3`, `train.py ...`, `python3 -m pkg ...`, or
  // an executable (run with --no_python). One program and its arguments, no shell syntax.
  std::string script;
  // Where torchrun keeps each rank's output beside the console copy; empty:
  // ${TMPDIR:-/tmp}/spotdnn-torchrun-$SPOTDNN_INSTANCE_ID (expanded on the instance).
  std::string log_dir;
};

// The user's command split into words as a POSIX shell would (quotes and backslashes; no
// expansion). INVALID_ARGUMENT naming `field` for an empty command, an open quote, or shell
// syntax (; | & < > $ ` ( ) or a newline outside quotes) that torchrun could not run.
absl::StatusOr<std::vector<std::string>> SplitCommandWords(absl::string_view field,
                                                           absl::string_view command);

// The shell command (POSIX sh; the local provider runs /bin/sh -c, the clouds /bin/bash -c) that
// starts the elastic launcher on one instance:
//   if torchrun is on PATH: torchrun ARGS, else PYTHON -m torch.distributed.run ARGS
// (PYTHON: the interpreter the user's command names, else python3) with ARGS
//   --nnodes=MIN:MAX --nproc_per_node=G --rdzv_backend=c10d --rdzv_endpoint=HOST:PORT
//   --rdzv_id=JOB --rdzv_conf=is_host=false,join_timeout=S,last_call_timeout=L --max_restarts=K
//   --redirects 1 --tee 1 --log_dir DIR [--module | --no_python] SCRIPT ARGS...
// (`--redirects 1 --tee 1`: torch 1.13 under Python 3.11 fails at start with the default 0; the
// console copy of each rank's stdout starts with "[default0]:", which the agent's sample parser
// reads through). INVALID_ARGUMENT naming the field ("commands.worker" for the script).
absl::StatusOr<std::string> ElasticLaunchCommand(const ElasticLaunchOptions& options);

// One instance type's share of a synchronous cluster.
struct ElasticGroup {
  std::string instance_type;
  int count = 0;
  int first_index = 0;
  int procs_per_instance = 1;  // ranks per instance: the type's GPUs
  int local_batch = 0;         // samples per rank per (micro-)step in the plan's split
  Market market = Market::kSpot;
};

// A synchronous cluster, or the instances joining one, to launch for one job.
struct ElasticCluster {
  ElasticLaunchOptions launch;  // procs_per_instance is each group's
  int global_batch = 0;         // samples per step over every rank (SPOTDNN_GLOBAL_BATCH)
  int accumulation_steps = 1;   // micro-steps per step (SPOTDNN_ACCUMULATION_STEPS)
  std::vector<ElasticGroup> groups;
  std::string worker_token_prefix;               // as ClusterLaunchRequest's
  std::map<std::string, std::string> extra_env;  // for every instance (the job's environment)
};

// The launch of an elastic cluster as the one cluster launch every provider takes: no parameter
// server, every instance's command the elastic launcher (ElasticLaunchCommand, its ranks per
// instance from each group's SPOTDNN_PROCS_PER_INSTANCE), and the script's environment:
// SPOTDNN_SYNC=allreduce, SPOTDNN_RENDEZVOUS (HOST:PORT), SPOTDNN_GLOBAL_BATCH,
// SPOTDNN_ACCUMULATION_STEPS, SPOTDNN_MIN_INSTANCES, SPOTDNN_MAX_INSTANCES, and per group
// SPOTDNN_LOCAL_BATCH and SPOTDNN_PROCS_PER_INSTANCE. INVALID_ARGUMENT naming the field.
absl::StatusOr<ClusterLaunchRequest> ElasticClusterRequest(const ElasticCluster& cluster);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_ELASTIC_LAUNCH_H_
