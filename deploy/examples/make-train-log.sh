#!/bin/sh
# Writes the example training log of the walk-through in docs/profiling.md to standard output:
# four short profiling runs of a ResNet-110-sized model on p3.2xlarge workers (one V100 each,
# batch 128) with 1, 2, 4 and 8 workers against one parameter server, every worker printing one
# SPOTDNN_SAMPLE line per step as the PyTorch snippet of docs/profiling.md does (jobs r110-1w,
# r110-2w, r110-4w, r110-8w; `step` is each worker's own step count).
#
# The numbers are SYNTHETIC, not measured: a stand-in for logs of your own runs, drawn from the
# paper's model with noise so that the fit has something to recover. Per step a worker computes for
# 0.22 s and moves S_parm = 11.5 MB each way; alone it exchanges at B_req = 400 MB/s, and with N
# workers the 1200 MB/s parameter server is shared as in eqs. 8-9 (a1 = 0.3, b1 = -0.2), so the 4-
# and 8-worker runs exceed its B_ps / B_req = 3 workers (what identifies the contention model).
# The loss follows eq. 3 (g1 = 400, g3 = 1200, g4 = 1, g5 = 0.6) in the cluster's global
# iterations. Iteration times have 2% and losses 1.5% log-normal noise; SEED picks the noise.
#
#   deploy/examples/make-train-log.sh > train.log
#   SEED=7 STEPS=3000 deploy/examples/make-train-log.sh > train.log   # another draw, longer runs
set -eu
exec awk -v seed="${SEED:-1}" -v steps="${STEPS:-1600}" '
function normal() {  # Box-Muller
  return sqrt(-2 * log(1 - rand())) * cos(6.283185307179586 * rand())
}
function bandwidth(n,   p, shared) {  # B_wk of eq. 8 with P of eq. 9
  p = a1 * sqrt(n) + b1
  if (p < 0) p = 0
  if (p > 1) p = 1
  shared = bps / n
  return shared < breq ? p * shared + (1 - p) * breq : breq
}
function convergence(n) {  # eq. 5 for n identical workers: sqrt(1 - 1/n)
  return sqrt(1 - 1 / n)
}
BEGIN {
  srand(seed)
  z = 0.22; s = 11.5; breq = 400; bps = 1200; a1 = 0.3; b1 = -0.2; batch = 128
  g1 = 400; g3 = 1200; g4 = 1; g5 = 0.6
  split("1 2 4 8", sizes, " ")
  start = 1700000000
  for (r = 1; r <= 4; ++r) {
    n = sizes[r]
    job = "r110-" n "w"
    comm = 2 * s / bandwidth(n)
    per_worker = int(steps / n)  # every run trains about `steps` global iterations
    for (w = 0; w < n; ++w) {
      t = start + 3600 * r + 0.05 * w
      for (k = 1; k <= per_worker; ++k) {
        it = (z + comm) * exp(0.02 * normal())
        t += it
        j = n * k  # the cluster global iterations when this worker finishes its k-th step
        loss = (g3 * sqrt((convergence(n) + g4) * n) / (j + g1) + g5) * exp(0.015 * normal())
        printf "SPOTDNN_SAMPLE job_id=%s worker_id=%d instance_type=p3.2xlarge gpu_type=V100 " \
               "gpus=1 batch_size=%d step=%d wall_time_s=%.3f iteration_time_s=%.6f " \
               "communication_time_s=%.6f loss=%.6f bytes_sent=%d bytes_received=%d " \
               "gpu_memory_gib=7.4 cluster_workers=%d\n", \
               job, w, batch, k, t, it, comm * exp(0.02 * normal()), loss, s * 1e6, s * 1e6, n
      }
    }
  }
}'
