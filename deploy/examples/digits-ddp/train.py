#!/usr/bin/python3
"""Synchronous data-parallel (PyTorch DDP) training of the digits network, run under torchrun.

The network and data of deploy/examples/digits/ (scikit-learn's handwritten digits, a 64-64-10
MLP), trained by DistributedDataParallel over gloo on CPU. Start it with torchrun, which gives
every rank RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and
MASTER_PORT; run without them it exits with status 2 and says so.

  torchrun --standalone --nproc_per_node=2 deploy/examples/digits-ddp/train.py --steps 200

The contract with spotdnn (docs/synchronous-runs.md):
  SPOTDNN_LOCAL_BATCH         this instance's samples per rank per micro-step (may differ
                              between instances; --local-batch)
  SPOTDNN_GLOBAL_BATCH        the samples of one step over every rank and micro-step
                              (--global-batch; default: what the local batches add up to)
  SPOTDNN_ACCUMULATION_STEPS  micro-steps per step (gradient accumulation; default 1)
  SPOTDNN_CHECKPOINT_DIR      shared by the ranks: rank 0 writes it (temporary file, then
                              rename), every start resumes from its latest checkpoint
  SPOTDNN_CHECKPOINT_EVERY    steps between checkpoints (--checkpoint-every)
  SPOTDNN_NOTICE_FILE         a revocation notice: the step in flight finishes, rank 0 writes a
                              checkpoint, every rank exits with status 75 so that torchrun
                              re-forms the group
  SPOTDNN_MAX_STEPS           the step at which training ends (--steps; 0 or unset: until stopped)
  SPOTDNN_GPU_TYPE            the GPU type the samples name (--gpu-type)
  SPOTDNN_EXAMPLE_STEP_DELAY  seconds each step sleeps (--step-delay): a run long enough to watch
  SPOTDNN_EXAMPLE_SAMPLE_DELAY  seconds each rank sleeps per sample of its micro-step before its
                              forward (--sample-delay): a GPU's compute emulated, so that more
                              instances make a step shorter as on real GPUs
  SPOTDNN_EXAMPLE_SLOWDOWN    measurements only (--slowdown K): each rank computes its forward and
                              backward K times per micro-step and keeps one gradient, an emulated
                              GPU type K times slower with the same results

Every step draws its global batch of sample indices from a generator seeded by the step, so every
rank (and every restart) agrees on it; rank r takes its slice at the offset the all-gathered
local batches give. The loss of a rank is its samples' summed loss times world / global batch, so
DDP's mean of the ranks' gradients is the gradient of the global batch's mean loss, whatever the
split. Each rank prints one SPOTDNN_SAMPLE line per step.
"""

import argparse
import json
import os
import signal
import sys
import time
import traceback

NOTICE_EXIT = 75  # EX_TEMPFAIL: stopped for a notice, to be restarted by torchrun
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
HIDDEN = 64
SEED = 0
MANIFEST = "latest.json"


def env(name, default=""):
    value = os.environ.get(name, "")
    return value if value != "" else default


def log(*parts):
    print("[digits-ddp rank %s]" % env("RANK", "?"), *parts, file=sys.stderr, flush=True)


def positive_int(name, text):
    try:
        value = int(text)
    except ValueError:
        sys.exit("digits-ddp: %s = %r: not a whole number" % (name, text))
    if value < 1:
        sys.exit("digits-ddp: %s = %d: must be at least 1" % (name, value))
    return value


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local-batch", default=env("SPOTDNN_LOCAL_BATCH", "32"),
                        help="samples per rank per micro-step (default $SPOTDNN_LOCAL_BATCH, 32)")
    parser.add_argument("--global-batch", default=env("SPOTDNN_GLOBAL_BATCH", ""),
                        help="samples per step over all ranks (default $SPOTDNN_GLOBAL_BATCH; "
                        "unset: the local batches' sum times the accumulation steps)")
    parser.add_argument("--accumulation-steps", default=env("SPOTDNN_ACCUMULATION_STEPS", "1"),
                        help="micro-steps per step (default $SPOTDNN_ACCUMULATION_STEPS, 1)")
    parser.add_argument("--steps", default=env("SPOTDNN_MAX_STEPS", "0"),
                        help="train until this step (default $SPOTDNN_MAX_STEPS; 0 or unset: "
                        "until stopped)")
    parser.add_argument("--checkpoint-every", default=env("SPOTDNN_CHECKPOINT_EVERY", "50"),
                        help="steps between checkpoints (default $SPOTDNN_CHECKPOINT_EVERY, 50)")
    parser.add_argument("--checkpoint-dir", default=env("SPOTDNN_CHECKPOINT_DIR", ""),
                        help="checkpoint folder shared by the ranks (default "
                        "$SPOTDNN_CHECKPOINT_DIR; empty: none)")
    parser.add_argument("--lr", type=float, default=0.2, help="SGD learning rate")
    parser.add_argument("--gpu-type", default=env("SPOTDNN_GPU_TYPE", "cpu"),
                        help="the GPU type the samples name (default $SPOTDNN_GPU_TYPE, cpu)")
    parser.add_argument("--slowdown", default=env("SPOTDNN_EXAMPLE_SLOWDOWN", "1"),
                        help="measurements only: compute each forward and backward K times")
    parser.add_argument("--step-delay", type=float,
                        default=float(env("SPOTDNN_EXAMPLE_STEP_DELAY", "0")),
                        help="seconds each step sleeps after its all-reduce (a run long enough "
                        "to watch; default $SPOTDNN_EXAMPLE_STEP_DELAY, 0)")
    parser.add_argument("--sample-delay", type=float,
                        default=float(env("SPOTDNN_EXAMPLE_SAMPLE_DELAY", "0")),
                        help="seconds each rank sleeps per sample of its micro-step, as compute "
                        "(default $SPOTDNN_EXAMPLE_SAMPLE_DELAY, 0)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds a collective waits for the other ranks")
    args = parser.parse_args()
    args.local_batch = positive_int("local batch (SPOTDNN_LOCAL_BATCH)", args.local_batch)
    args.accumulation_steps = positive_int("accumulation steps (SPOTDNN_ACCUMULATION_STEPS)",
                                           args.accumulation_steps)
    if args.global_batch != "":
        args.global_batch = positive_int("global batch (SPOTDNN_GLOBAL_BATCH)", args.global_batch)
    else:
        args.global_batch = None
    args.steps = 0 if str(args.steps) == "0" else positive_int("steps (SPOTDNN_MAX_STEPS)",
                                                               args.steps)
    args.checkpoint_every = positive_int("checkpoint every (SPOTDNN_CHECKPOINT_EVERY)",
                                         args.checkpoint_every)
    args.slowdown = positive_int("slowdown (SPOTDNN_EXAMPLE_SLOWDOWN)", args.slowdown)
    for name, value in (("step delay (SPOTDNN_EXAMPLE_STEP_DELAY)", args.step_delay),
                        ("sample delay (SPOTDNN_EXAMPLE_SAMPLE_DELAY)", args.sample_delay)):
        if not value >= 0:
            sys.exit("digits-ddp: %s = %r: must be 0 or more seconds" % (name, value))
    return args


def split_batch(local_batches, global_batch, accumulation):
    """The local batches every rank uses: as given when they make the global batch, otherwise
    rescaled in proportion (largest remainders, each at least 1) so that they do."""
    total = sum(local_batches)
    if global_batch is None:
        return list(local_batches), total * accumulation
    if global_batch % accumulation != 0:
        sys.exit("digits-ddp: global batch %d is not a multiple of the %d accumulation steps" %
                 (global_batch, accumulation))
    micro = global_batch // accumulation
    if micro == total:
        return list(local_batches), global_batch
    if micro < len(local_batches):
        sys.exit("digits-ddp: global batch %d over %d accumulation steps leaves fewer samples "
                 "than the %d ranks" % (global_batch, accumulation, len(local_batches)))
    shares = [micro * b / total for b in local_batches]
    split = [max(1, int(s)) for s in shares]
    order = sorted(range(len(split)), key=lambda r: shares[r] - int(shares[r]), reverse=True)
    i = 0
    while sum(split) != micro:
        r = order[i % len(order)]
        if sum(split) < micro:
            split[r] += 1
        elif split[r] > 1:
            split[r] -= 1
        i += 1
    return split, global_batch


def placement_of(group_ranks):
    """Ranks per instance in instance order, from every rank's GROUP_RANK."""
    counts = {}
    for g in group_ranks:
        counts[g] = counts.get(g, 0) + 1
    return [counts[g] for g in sorted(counts)]


class Checkpoints:
    """step-N.pt files and a manifest naming the latest, each written to a temporary name and
    renamed, so a reader never sees half a file."""

    def __init__(self, folder):
        self.dir = folder

    def latest(self):
        if not self.dir:
            return None
        path = os.path.join(self.dir, MANIFEST)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            manifest = json.load(f)
        return manifest["step"], os.path.join(self.dir, manifest["file"])

    def write(self, torch, step, model, optimizer):
        if not self.dir:
            return
        os.makedirs(self.dir, exist_ok=True)
        previous = self.latest()
        if previous is not None and previous[0] == step:
            return
        name = "step-%d.pt" % step
        tmp = os.path.join(self.dir, ".%s.tmp" % name)
        torch.save({"step": step, "model": model.state_dict(),
                    "optimizer": optimizer.state_dict()}, tmp)
        os.replace(tmp, os.path.join(self.dir, name))
        tmp = os.path.join(self.dir, "." + MANIFEST + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"step": step, "file": name}, f)
        os.replace(tmp, os.path.join(self.dir, MANIFEST))
        # Keep the newest two.
        for entry in os.listdir(self.dir):
            if entry.startswith("step-") and entry.endswith(".pt") and entry != name:
                if previous is None or entry != os.path.basename(previous[1]):
                    os.remove(os.path.join(self.dir, entry))
        log("checkpoint at step %d: %s" % (step, os.path.join(self.dir, name)))


class Notice:
    """A revocation notice: SIGTERM, or SPOTDNN_NOTICE_FILE holding something other than what it
    held when this rank started (a notice already there belongs to an earlier start)."""

    def __init__(self, path):
        self.path = path
        self.at_start = self.read()
        self.signalled = False

    def read(self):
        if not self.path:
            return ""
        try:
            with open(self.path) as f:
                return f.read().strip()
        except OSError:
            return ""

    def seen(self):
        if self.signalled:
            return True
        content = self.read()
        return content != "" and content != self.at_start


def main():
    missing = [name for name in TORCHRUN_ENV if name not in os.environ]
    if missing:
        print("digits-ddp: not started by torchrun (%s not set): run it as `torchrun "
              "--nproc_per_node=N %s ...`, or under `spotdnn run` with \"sync\": \"allreduce\"" %
              (", ".join(missing), sys.argv[0]), file=sys.stderr)
        sys.exit(2)
    args = parse_args()

    import datetime

    import numpy as np
    import torch
    import torch.distributed as dist
    from sklearn.datasets import load_digits

    torch.set_num_threads(1)
    notice = Notice(env("SPOTDNN_NOTICE_FILE"))

    def on_term(signum, _frame):
        notice.signalled = True
        log("signal %d: stopping after this step, as for a notice" % signum)

    signal.signal(signal.SIGTERM, on_term)

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    world = dist.get_world_size()

    # What every rank brings: its local batch and its instance (GROUP_RANK: torchrun's node rank).
    mine = torch.tensor([args.local_batch, int(env("GROUP_RANK", "0"))], dtype=torch.long)
    gathered = [torch.zeros(2, dtype=torch.long) for _ in range(world)]
    dist.all_gather(gathered, mine)
    asked = [int(t[0]) for t in gathered]
    placement = placement_of([int(t[1]) for t in gathered])
    local_batches, global_batch = split_batch(asked, args.global_batch, args.accumulation_steps)
    if local_batches != asked and rank == 0:
        log("local batches %s do not make the global batch %d over %d accumulation steps: "
            "using %s" % (asked, global_batch, args.accumulation_steps, local_batches))
    local_batch = local_batches[rank]
    offset = sum(local_batches[:rank])
    micro_batch = sum(local_batches)
    accumulation = args.accumulation_steps

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)

    torch.manual_seed(SEED)
    net = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(),
                              torch.nn.Linear(HIDDEN, 10))
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr)
    checkpoints = Checkpoints(args.checkpoint_dir)
    step = 0
    if rank == 0:
        latest = checkpoints.latest()
        if latest is not None:
            state = torch.load(latest[1])
            net.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            step = state["step"]
            log("resumed from the checkpoint at step %d (%s)" % (step, latest[1]))
    start = torch.tensor([step], dtype=torch.long)
    dist.broadcast(start, 0)
    step = int(start[0])
    # DDP broadcasts rank 0's parameters (a resumed checkpoint's) to every rank.
    model = torch.nn.parallel.DistributedDataParallel(net)

    timer = {"first": None, "last": None}

    def timed_allreduce(state, bucket):
        # The default hook's work (mean over the ranks), timed from the first bucket's start to
        # the last one's end: the all-reduce, with the wait for slower ranks in it.
        now = time.perf_counter()
        if timer["first"] is None:
            timer["first"] = now
        tensor = bucket.buffer().div_(world)
        fut = dist.all_reduce(tensor, async_op=True).get_future()

        def done(f):
            timer["last"] = time.perf_counter()
            return f.value()[0]

        return fut.then(done)

    model.register_comm_hook(None, timed_allreduce)
    params = list(net.parameters())
    loss_sum_fn = torch.nn.CrossEntropyLoss(reduction="sum")
    scale = world / global_batch
    samples = len(x)
    # Under spotdnn a stream per rank and per start: the steps a restarted rank computes again
    # are stored as its own, and spotdnn measures the restart from where each stream begins.
    worker_id = ("%s-rank%s-start%d" % (env("SPOTDNN_INSTANCE_ID"), env("LOCAL_RANK"),
                                        int(time.time() * 1000))
                 if env("SPOTDNN_INSTANCE_ID") else "rank%d" % rank)
    shape = ("instances=%d gpus_per_instance=%d" % (len(placement), placement[0])
             if len(set(placement)) == 1 else "placement=%s" % ",".join(map(str, placement)))
    log("world %d, placement %s, local batches %s, global batch %d, %d accumulation steps, "
        "starting at step %d of %s" % (world, placement, local_batches, global_batch, accumulation,
                                       step, args.steps or "no limit"))

    stopped_for_notice = False
    while args.steps == 0 or step < args.steps:
        began = time.perf_counter()
        timer["first"] = timer["last"] = None
        indices = np.random.default_rng([SEED, step]).integers(0, samples, size=global_batch)
        loss_sum = 0.0
        optimizer.zero_grad(set_to_none=True)
        for micro in range(accumulation):
            lo = micro * micro_batch + offset
            rows = torch.as_tensor(indices[lo:lo + local_batch])
            xs, ys = x[rows], y[rows]
            if args.sample_delay > 0:
                time.sleep(args.sample_delay * len(rows))
            for _ in range(args.slowdown - 1):
                # The same forward and backward again, its gradient dropped: K times the compute.
                torch.autograd.grad(loss_sum_fn(net(xs), ys) * scale, params)
            if micro < accumulation - 1:
                with model.no_sync():
                    loss = loss_sum_fn(model(xs), ys)
                    (loss * scale).backward()
            else:
                loss = loss_sum_fn(model(xs), ys)
                (loss * scale).backward()
            loss_sum += loss.item()
        optimizer.step()
        if args.step_delay > 0:
            time.sleep(args.step_delay)
        computed = time.perf_counter()
        # The global batch's mean loss, and whether any rank saw a notice, in one small all-reduce.
        flags = torch.tensor([loss_sum, 1.0 if notice.seen() else 0.0], dtype=torch.float64)
        dist.all_reduce(flags)
        ended = time.perf_counter()
        step += 1
        # The all-reduces' share of the step: the gradients' and the loss's.
        sync = ended - computed
        if timer["first"] is not None and timer["last"] is not None:
            sync += min(max(0.0, timer["last"] - timer["first"]), computed - began)
        print("SPOTDNN_SAMPLE step=%d worker_id=%s wall_time_s=%.3f gpu_type=%s local_batch=%d "
              "iteration_time_s=%.6f sync_time_s=%.6f ranks=%d %s loss=%.6f "
              "metric.global_batch=%d metric.accumulation_steps=%d" %
              (step, worker_id, time.time(), args.gpu_type, local_batch, ended - began, sync,
               world, shape, float(flags[0]) / global_batch, global_batch, accumulation),
              flush=True)
        if step % args.checkpoint_every == 0 and rank == 0:
            checkpoints.write(torch, step, net, optimizer)
        if float(flags[1]) > 0:
            stopped_for_notice = True
            break

    if rank == 0:
        checkpoints.write(torch, step, net, optimizer)
    # Every rank past rank 0's checkpoint before any exits.
    dist.barrier()
    if stopped_for_notice:
        log("stopped for a revocation notice at step %d; exiting %d so that torchrun re-forms "
            "the group" % (step, NOTICE_EXIT))
        exit_now(NOTICE_EXIT)
    log("finished at step %d" % step)
    exit_now(0)


def exit_now(code):
    """Ends the process at once, the DDP model still alive. Destroying it would join gloo's
    threads while holding the GIL, and the thread that ran the comm hook's Python callback may
    need the GIL to let go of it: the rank would hang there (and torchrun with it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run():
    try:
        main()
    except SystemExit as e:
        # In the handler, the traceback keeps main's objects alive: nothing is destroyed.
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            exit_now(1)
        exit_now(e.code or 0)
    except BaseException:  # noqa: B902 - every failure ends the rank with its traceback
        traceback.print_exc()
        exit_now(1)
    exit_now(0)


if __name__ == "__main__":
    run()
