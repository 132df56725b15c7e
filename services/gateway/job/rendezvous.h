// The rendezvous of a synchronous job: a c10d TCPStore (torch.distributed) that lives on the
// control side, not on a spot instance, so that no revocation takes the job's membership with
// it. A small process the job starts (the store hosted by Python, as torchrun's own agent would
// host it), detached from the process that starts it so that it outlives a killed `spotdnn run`;
// its address, port and pid are in the job's log ("rendezvous" events), so that a resumed job
// re-adopts it when it is still alive and reachable, else starts it again on the same port (the
// instances' launch commands name that port). The job stops it when it ends.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_RENDEZVOUS_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_RENDEZVOUS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace spotdnn::job {

// A running (or once running) rendezvous store.
struct RendezvousRecord {
  std::string host;  // where the instances reach it
  int port = 0;
  int64_t pid = 0;  // the store's process on this machine

  std::string Endpoint() const;  // HOST:PORT
};

// The record as the job log keeps it ({"host":...,"port":...,"pid":...}) and back; DATA_LOSS
// naming the text when it cannot be read.
std::string RendezvousJson(const RendezvousRecord& record);
absl::StatusOr<RendezvousRecord> ParseRendezvousJson(const std::string& text);

struct RendezvousOptions {
  // The interpreter with torch (Debian's python3-torch is for /usr/bin/python3).
  std::string python = "/usr/bin/python3";
  // How long the store may take to listen (importing torch takes seconds).
  absl::Duration start_timeout = absl::Seconds(60);
  // Where its output goes (appended); empty: /dev/null.
  std::string log_path;
};

// Starts a store for `job_id` listening on `port` (0: a free one) and reachable at `host`;
// returns it once it listens. The process leads a session of its own and keeps running when the
// caller dies. UNAVAILABLE (with the store's last output) when it exits or does not listen in
// time; INVALID_ARGUMENT for an empty host or a port outside 0-65535.
absl::StatusOr<RendezvousRecord> StartRendezvous(const std::string& job_id, const std::string& host,
                                                 int port, const RendezvousOptions& options);

// True when `record`'s process still runs as this job's store (its command line says so, so a
// reused pid does not count) and its port accepts a connection at `host`.
bool RendezvousAlive(const std::string& job_id, const RendezvousRecord& record);

// Stops the store (SIGTERM, SIGKILL after `grace`) when it is still this job's; OK when gone.
absl::Status StopRendezvous(const std::string& job_id, const RendezvousRecord& record,
                            absl::Duration grace = absl::Seconds(5));

// Stops every store of `job_id` still running on this machine (found by their command lines):
// what a killed caller left of a rendezvous it did not record (a profiling run's). Returns how
// many it stopped.
int StopStaleRendezvous(const std::string& job_id, absl::Duration grace = absl::Seconds(5));

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_RENDEZVOUS_H_
