#!/usr/bin/python3
"""A heterogeneous global-batch split, predicted by spotdnn and measured on real DDP runs.

Two CPU "GPU types" of different speed, emulated on this machine with the DDP example
(deploy/examples/digits-ddp/train.py): `fast-cpu` computes each forward and backward once,
`slow-cpu` K times (--slowdown K). The flow is the one a user runs with spotdnn's own commands:

  1. profile runs of each type under torchrun: one rank at several local batches, and two ranks
     of the same type as two instances (one rank each) for the all-reduce terms;
  2. `spotdnn profile import LOG --db DB --job TYPE` of their SPOTDNN_SAMPLE lines,
     `spotdnn profile fit --db DB --name W`, `spotdnn profile export W --db DB --out W.json`;
  3. a catalog with two instance types, `fast` (gpu_type fast-cpu) and `slow` (slow-cpu), 1 GPU
     each, and `spotdnn predict --workload W.json --catalog CAT.json --cluster fast=1,slow=1
     --global-batch G --iterations 1000 --json` for the split (`local_batches`) and its step
     (`iteration_time_s`), and `--local-batch G/2` for the even split's;
  4. the real mixed runs, one instance of each type, with the predicted split and with the even
     split: the measured step is the median over the steps after the warm-up of the slowest
     rank's step time.

Prints a table (slowdown, split, local batches, predicted step, measured step, error); --json
prints one object. Everything it ran is kept under --work (logs, databases, profiles, the
predictions), which the e2e test reads. Timings depend on what else the machine runs: run it on a
quiet machine, and say how quiet it was.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TRAIN = os.path.join(REPO, "deploy", "examples", "digits-ddp", "train.py")
PYTHON = "/usr/bin/python3"
WORKLOAD = "digits-ddp"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command():
    """torchrun, or python3 -m torch.distributed.run; --redirects 1 --tee 1 because torchrun of
    PyTorch 1.13 on Python 3.11 fails at start with its defaults (0)."""
    for path in ("/usr/bin/torchrun", "/usr/local/bin/torchrun"):
        if os.path.exists(path):
            return [path, "--redirects", "1", "--tee", "1"]
    return [PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1"]


def run_group(instances, steps, log_path, timeout_s, global_batch=None, nice=0, realtime=0,
              hold_cpus=False):
    """Runs one torchrun per instance (one rank each, a static rendezvous on 127.0.0.1), each
    with its own local batch, GPU type and slowdown; the ranks' output goes to log_path, their
    messages to log_path + ".err".
    `instances`: [(gpu_type, slowdown, local_batch)]."""
    port = free_port()
    # --hold-cpus: a SCHED_FIFO spin loop per CPU below the ranks' priority takes the time the
    # ranks leave (waiting in an all-reduce, or a CPU no rank uses), so that no other work on the
    # machine shares its caches and memory bandwidth with theirs.
    holders = []
    if realtime > 1 and hold_cpus:
        for cpu in range(os.cpu_count()):
            holders.append(subprocess.Popen(
                ["taskset", "-c", str(cpu), "chrt", "-f", str(realtime - 1), PYTHON, "-c",
                 # Ends by itself after the run's timeout, should this script be killed.
                 "import time\nend = time.time() + %d\nwhile time.time() < end: pass" %
                 timeout_s]))
    procs = []
    outputs = []
    for node, (gpu_type, slowdown, local_batch) in enumerate(instances):
        env = dict(os.environ)
        env.update({"SPOTDNN_LOCAL_BATCH": str(local_batch), "SPOTDNN_GPU_TYPE": gpu_type,
                    "SPOTDNN_EXAMPLE_SLOWDOWN": str(slowdown), "SPOTDNN_MAX_STEPS": str(steps),
                    "OMP_NUM_THREADS": "1"})
        for name in ("SPOTDNN_GLOBAL_BATCH", "SPOTDNN_ACCUMULATION_STEPS",
                     "SPOTDNN_CHECKPOINT_DIR", "SPOTDNN_NOTICE_FILE", "SPOTDNN_INSTANCE_ID"):
            env.pop(name, None)
        if global_batch is not None:
            env["SPOTDNN_GLOBAL_BATCH"] = str(global_batch)
        cmd = (["chrt", "-f", str(realtime)] if realtime else []) + torchrun_command() + [
            "--nnodes=%d" % len(instances), "--node_rank=%d" % node, "--nproc_per_node=1",
            "--master_addr=127.0.0.1", "--master_port=%d" % port,
            "--log_dir=%s" % os.path.join(os.path.dirname(log_path), "torchrun-logs"),
            TRAIN, "--timeout", str(timeout_s)]
        # The ranks' sample lines (standard output, which torchrun tees line by line) apart from
        # their messages (standard error, unbuffered, which would land inside a teed line).
        out = open("%s.node%d" % (log_path, node), "w+")
        err = open("%s.node%d.err" % (log_path, node), "w+")
        outputs.append((out, err))
        procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=err,
                                      cwd=REPO,
                                      preexec_fn=(lambda: os.nice(nice)) if nice else None))
    deadline = time.time() + timeout_s
    failed = None
    for node, p in enumerate(procs):
        try:
            rc = p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            rc = "timeout"
        if rc != 0 and failed is None:
            failed = (node, rc)
    for h in holders:
        h.kill()
        h.wait()
    text = messages = ""
    for out, err in outputs:
        out.seek(0)
        text += out.read()
        err.seek(0)
        messages += err.read()
        for f in (out, err):
            f.close()
            os.remove(f.name)
    with open(log_path, "w") as f:
        f.write(text)
    with open(log_path + ".err", "w") as f:
        f.write(messages)
    if failed is not None:
        sys.exit("ddp_split: the run of %s failed on instance %d (%s); its output: %s" %
                 (instances, failed[0], failed[1], log_path + ".err"))
    return log_path


def samples(log_path):
    """The SPOTDNN_SAMPLE lines of a log, as dicts of their fields."""
    out = []
    with open(log_path) as f:
        for line in f:
            at = line.find("SPOTDNN_SAMPLE")
            if at < 0:
                continue
            fields = dict(tok.split("=", 1) for tok in line[at:].split()[1:] if "=" in tok)
            out.append(fields)
    return out


def measured_step(log_paths, warmup):
    """Median over the steps after `warmup` (of every run) of the slowest rank's step time, and
    the global batches the steps trained."""
    times = []
    batches = set()
    for log_path in log_paths:
        by_step = {}
        for s in samples(log_path):
            step = int(s["step"])
            by_step[step] = max(by_step.get(step, 0.0), float(s["iteration_time_s"]))
            batches.add(int(s["metric.global_batch"]))
        times += [t for step, t in sorted(by_step.items()) if step > warmup]
    if not times:
        sys.exit("ddp_split: no step after the warm-up in %s" % log_paths)
    return statistics.median(times), sorted(batches)


def spotdnn(binary, args, log):
    cmd = [binary] + args + ["--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    log.write("$ %s\n%s%s\n" % (" ".join(cmd), done.stdout, done.stderr))
    if done.returncode != 0:
        sys.exit("ddp_split: %s failed (%d): %s" % (" ".join(cmd), done.returncode,
                                                     done.stderr.strip() or done.stdout.strip()))
    return json.loads(done.stdout)


def write_catalog(path):
    def instance(name, gpu_type, price):
        return {"name": name, "gpu_type": gpu_type, "gpus": 1, "gpu_memory_gib": 1,
                "spot_price_per_hour": price, "on_demand_price_per_hour": 3 * price, "quota": 4}

    catalog = {
        "name": "ddp-split",
        "description": "Two CPU GPU types of different speed on this machine (the DDP example "
                       "with --slowdown); the prices only rank plans.",
        "provider": "local", "region": "this-machine", "prices_as_of": "2026-11",
        "instance_types": [instance("fast", "fast-cpu", 0.02), instance("slow", "slow-cpu", 0.01)],
        # A catalog names a parameter server whatever the workload; a synchronous one uses none.
        "parameter_server": {"instance_type": "local.ps", "bandwidth_mb_per_s": 50,
                             "spot_price_per_hour": 0.01, "on_demand_price_per_hour": 0.01},
        "pcie_bandwidth_mb_per_s": 10000,
    }
    with open(path, "w") as f:
        json.dump(catalog, f, indent=1)


def one_factor(args, slowdown, work, log):
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    db = os.path.join(work, "profiles.db")
    if os.path.exists(db):
        os.remove(db)
    types = [("fast-cpu", 1), ("slow-cpu", slowdown)]
    imports = {}
    # 1-2. Profile runs of each type, imported as they finish.
    for gpu_type, k in types:
        for b in args.profile_batches:
            for n in (1, 2):
                path = os.path.join(work, "logs", "profile-%s-n%d-b%d.log" % (gpu_type, n, b))
                run_group([(gpu_type, k, b)] * n, args.profile_steps, path, args.timeout,
                          nice=args.nice, realtime=args.realtime, hold_cpus=args.hold_cpus)
                # A job per run: samples are told apart by job, worker and step.
                job = "profile-%s-n%d-b%d" % (gpu_type, n, b)
                result = spotdnn(args.spotdnn, ["profile", "import", path, "--db", db,
                                                "--job", job], log)
                imports[job] = int(result["imported"]) - int(result.get("duplicates", 0))
    fit = spotdnn(args.spotdnn, ["profile", "fit", "--db", db, "--name", WORKLOAD], log)
    with open(os.path.join(work, "fit.json"), "w") as f:
        json.dump(fit, f, indent=1)
    profile = os.path.join(work, WORKLOAD + ".json")
    spotdnn(args.spotdnn, ["profile", "export", WORKLOAD, "--db", db, "--out", profile], log)
    # 3. The split and the even split, predicted.
    catalog = os.path.join(work, "catalog.json")
    write_catalog(catalog)
    g = args.global_batch
    base = ["predict", "--workload", profile, "--catalog", catalog, "--cluster", "fast=1,slow=1",
            "--iterations", "1000"]
    split = spotdnn(args.spotdnn, base + ["--global-batch", str(g)], log)
    even = spotdnn(args.spotdnn, base + ["--local-batch", str(g // 2)], log)
    for name, p in (("split", split), ("even", even)):
        with open(os.path.join(work, "predict-%s.json" % name), "w") as f:
            json.dump(p, f, indent=1)
    b_fast = int(round(split["local_batches"]["fast"]))
    b_slow = int(round(split["local_batches"]["slow"]))
    # 4. The real mixed runs, the two splits taking turns (--repeats): a change in what else the
    # machine runs then weighs on both.
    runs = {"split": (b_fast, b_slow), "even": (g // 2, g // 2)}
    logs = {"split": [], "even": []}
    for repeat in range(args.repeats):
        for name, batches in runs.items():
            path = os.path.join(work, "logs", "run-%s%s.log" %
                                (name, "" if repeat == 0 else "-%d" % (repeat + 1)))
            run_group([("fast-cpu", 1, batches[0]), ("slow-cpu", slowdown, batches[1])],
                      args.steps, path, args.timeout, global_batch=g, nice=args.nice,
                      realtime=args.realtime, hold_cpus=args.hold_cpus)
            logs[name].append(path)
    rows = []
    for name, predicted in (("split", split), ("even", even)):
        batches = runs[name]
        measured, global_batches = measured_step(logs[name], args.warmup)
        path = logs[name]
        want = float(predicted["iteration_time_s"])
        rows.append({"slowdown": slowdown, "split": name, "local_batch_fast": batches[0],
                     "local_batch_slow": batches[1], "global_batch": g,
                     "predicted_step_s": want, "measured_step_s": measured,
                     "error_percent": 100.0 * (want - measured) / measured,
                     "global_batches_seen": global_batches, "logs": path})
    return {"slowdown": slowdown, "imports": imports, "rows": rows,
            "fit_types": sorted(a["gpu_type"] for a in fit["profile"].get("allreduce", []))}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spotdnn", default=os.path.join(REPO, "build-asan", "spotdnn"),
                        help="the spotdnn binary (default build-asan/spotdnn)")
    parser.add_argument("--work", default="/tmp/ddp_split", help="folder for everything run")
    parser.add_argument("--global-batch", type=int, default=8192)
    parser.add_argument("--slowdown", default="2,3",
                        help="the slow type's factors, one measurement each (default 2,3)")
    parser.add_argument("--profile-batches", default="1024,2048,4096,8192",
                        help="local batches of the profile runs")
    parser.add_argument("--profile-steps", type=int, default=40)
    parser.add_argument("--steps", type=int, default=100, help="steps of each mixed run")
    parser.add_argument("--warmup", type=int, default=10, help="steps left out of the median")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each split, taking turns (default 1)")
    parser.add_argument("--nice", type=int, default=0,
                        help="the runs' niceness (negative, as root: ahead of other work on a "
                        "shared machine)")
    parser.add_argument("--realtime", type=int, default=0,
                        help="run the ranks under SCHED_FIFO at this priority (chrt -f; root): "
                        "a quiet machine's timings on a shared one; the kernel still leaves "
                        "other work 5%% of each second")
    parser.add_argument("--hold-cpus", action="store_true",
                        help="with --realtime P: during each run, a spin loop at priority P-1 on "
                        "every CPU keeps other work off the machine")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a run may take")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    args.profile_batches = [int(b) for b in args.profile_batches.split(",")]
    factors = [int(k) for k in args.slowdown.split(",")]
    if args.global_batch < 2 or args.global_batch % 2:
        sys.exit("ddp_split: --global-batch %d: must be even and at least 2" % args.global_batch)
    if not os.access(args.spotdnn, os.X_OK):
        sys.exit("ddp_split: --spotdnn %s is not an executable (build the spotdnn target)" %
                 args.spotdnn)
    os.makedirs(args.work, exist_ok=True)
    started = time.time()
    load_before = os.getloadavg()
    results = []
    with open(os.path.join(args.work, "commands.log"), "w") as log:
        for k in factors:
            results.append(one_factor(args, k, os.path.join(args.work, "slowdown-%d" % k), log))
    report = {"global_batch": args.global_batch, "cpus": os.cpu_count(),
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "seconds": time.time() - started, "nice": args.nice, "realtime": args.realtime,
              "hold_cpus": args.hold_cpus, "repeats": args.repeats,
              "steps": args.steps, "warmup": args.warmup, "results": results}
    with open(os.path.join(args.work, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    if args.json:
        print(json.dumps(report))
        return
    print("DDP split on two CPU GPU types, global batch %d, %d x %d steps per split (load "
          "average %.1f before, %.1f after, %d CPUs, nice %d, SCHED_FIFO %d)" %
          (args.global_batch, args.repeats, args.steps, load_before[0],
           report["load_average_after"][0], os.cpu_count(), args.nice, args.realtime))
    print("%-8s  %-5s  %11s  %13s  %12s  %7s" %
          ("slowdown", "split", "local batch", "predicted (s)", "measured (s)", "error"))
    for r in results:
        for row in r["rows"]:
            print("%-8d  %-5s  %11s  %13.5f  %12.5f  %6.1f%%" %
                  (row["slowdown"], row["split"],
                   "%d+%d" % (row["local_batch_fast"], row["local_batch_slow"]),
                   row["predicted_step_s"], row["measured_step_s"], row["error_percent"]))


if __name__ == "__main__":
    main()
