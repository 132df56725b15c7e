#!/usr/bin/python3
"""Asynchronous parameter-server training of a small network on scikit-learn's handwritten digits.

One script for both roles (--role, default $SPOTDNN_ROLE), made to run under `spotdnn run`: it
reads only the SPOTDNN_* variables every spotdnn instance gets, prints a SPOTDNN_SAMPLE line per
worker step (the instance wrapper streams them to the profiler), checkpoints the parameter
server's state in $SPOTDNN_CHECKPOINT_DIR, restores it when a replacement starts, and handles the
revocation notice (SIGTERM and $SPOTDNN_NOTICE_FILE): a parameter server writes a last checkpoint
and exits, a worker stops cleanly.

PyTorch (CPU) and scikit-learn from Debian (python3-torch, python3-sklearn); nothing is
downloaded: the data set ships with scikit-learn.

  parameter server  SPOTDNN_PS_PORT (listen), SPOTDNN_INDEX (its shard of the parameters),
                    SPOTDNN_PARAMETER_SERVERS (how many share the parameters),
                    SPOTDNN_CHECKPOINT_DIR (ps-INDEX.json names the latest checkpoint)
  worker            SPOTDNN_PS_ADDRESSES, SPOTDNN_INDEX, SPOTDNN_BATCH_SIZE,
                    SPOTDNN_MAX_STEPS (stop after that many steps; profiling runs)
"""

import argparse
import json
import os
import pickle
import signal
import socket
import sys
import threading
import time
from multiprocessing.connection import Client, Listener

import numpy as np
import torch
from sklearn.datasets import load_digits

AUTHKEY = b"spotdnn-digits"
HIDDEN = 64
SEED = 0


def env(name, default=""):
    return os.environ.get(name, default)


def log(*parts):
    print("[digits]", *parts, flush=True)


def make_model():
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, 10))


def shard_of(index, servers):
    """The parameter tensors (by position) parameter server `index` of `servers` holds."""
    count = len(list(make_model().parameters()))
    return [i for i in range(count) if i % servers == index]


# ---- parameter server ------------------------------------------------------------------------

class ParameterServer:
    def __init__(self, index, servers, lr, checkpoint_dir, checkpoint_every_s):
        self.index = index
        self.positions = shard_of(index, servers)
        params = list(make_model().parameters())
        self.params = [params[i].detach().clone() for i in self.positions]
        self.step = 0
        self.lr = lr
        self.lock = threading.Lock()
        self.dir = checkpoint_dir
        self.every = checkpoint_every_s
        self.saved_step = -1
        self.restore()

    def manifest(self):
        return os.path.join(self.dir, "ps-%d.json" % self.index)

    def restore(self):
        if not self.dir or not os.path.exists(self.manifest()):
            return
        with open(self.manifest()) as f:
            m = json.load(f)
        state = torch.load(os.path.join(self.dir, m["file"]))
        self.params = state["params"]
        self.step = state["step"]
        self.saved_step = self.step
        log("parameter server %d restored the checkpoint at step %d" % (self.index, self.step))

    def checkpoint(self):
        if not self.dir:
            return
        with self.lock:
            step = self.step
            params = [p.clone() for p in self.params]
        if step == self.saved_step:
            return
        os.makedirs(self.dir, exist_ok=True)
        name = "ps-%d-%d.pt" % (self.index, step)
        tmp = os.path.join(self.dir, name + ".tmp")
        torch.save({"step": step, "params": params}, tmp)
        os.replace(tmp, os.path.join(self.dir, name))
        tmp = self.manifest() + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"step": step, "file": name}, f)
        os.replace(tmp, self.manifest())
        old = os.path.join(self.dir, "ps-%d-%d.pt" % (self.index, self.saved_step))
        if self.saved_step >= 0 and os.path.exists(old):
            os.remove(old)
        self.saved_step = step

    def serve(self, conn):
        try:
            while True:
                message = conn.recv()
                if message[0] == "push":
                    with self.lock:
                        for p, g in zip(self.params, message[1]):
                            p -= self.lr * torch.from_numpy(g)
                        self.step += 1
                with self.lock:
                    # numpy on the wire: torch tensors would be shared through file descriptors.
                    reply = (self.step, [p.numpy().copy() for p in self.params])
                conn.send(reply)
        except (EOFError, OSError):
            pass
        finally:
            conn.close()

    def run(self, port, stop):
        listener = Listener(("", port), authkey=AUTHKEY)
        log("parameter server %d listening on port %d, %d tensors" %
            (self.index, port, len(self.params)))

        def accept():
            while True:
                try:
                    conn = listener.accept()
                except OSError:
                    return
                threading.Thread(target=self.serve, args=(no_delay(conn),), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        while not stop.wait(self.every):
            self.checkpoint()
        # The notice (or a plain stop): the last checkpoint, then go.
        self.checkpoint()
        log("parameter server %d stopped at step %d" % (self.index, self.step))


# ---- worker ----------------------------------------------------------------------------------

def no_delay(conn):
    """Small messages go out at once (Nagle's algorithm would hold each for a delayed ACK)."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.close()
    return conn


def connect(address, stop):
    host, port = address.rsplit(":", 1)
    delay = 0.2
    while not stop.is_set():
        try:
            return no_delay(Client((host, int(port)), authkey=AUTHKEY))
        except OSError:
            stop.wait(delay)
            delay = min(delay * 2, 2.0)
    return None


def run_worker(args, stop):
    addresses = [a for a in env("SPOTDNN_PS_ADDRESSES").split(",") if a]
    if not addresses:
        sys.exit("no parameter server: SPOTDNN_PS_ADDRESSES is empty")
    servers = len(addresses)
    index = int(env("SPOTDNN_INDEX", "0"))
    batch = int(env("SPOTDNN_BATCH_SIZE", "0") or 0) or args.batch
    max_steps = int(env("SPOTDNN_MAX_STEPS", "0") or 0)
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    model = make_model()
    params = list(model.parameters())
    shards = [shard_of(i, servers) for i in range(servers)]
    rng = np.random.default_rng(1000 + index)
    loss_fn = torch.nn.CrossEntropyLoss()
    conns = [connect(a, stop) for a in addresses]
    if stop.is_set():
        return
    # The first pull.
    for conn in conns:
        conn.send(("pull",))
    grads = None
    step = 0
    while not stop.is_set() and (max_steps == 0 or step < max_steps):
        started = time.time()
        sent = received = 0
        try:
            if grads is not None:
                for i, conn in enumerate(conns):
                    payload = ("push", [grads[j].numpy() for j in shards[i]])
                    sent += len(pickle.dumps(payload))
                    conn.send(payload)
            for i, conn in enumerate(conns):
                _, values = conn.recv()
                received += len(pickle.dumps(values))
                with torch.no_grad():
                    for j, v in zip(shards[i], values):
                        params[j].copy_(torch.from_numpy(v))
        except (EOFError, OSError, ConnectionError):
            log("lost a parameter server; waiting for it")
            conns = [connect(a, stop) for a in addresses]
            if stop.is_set():
                break
            for conn in conns:
                conn.send(("pull",))
            grads = None
            continue
        communication = time.time() - started
        if args.step_delay > 0:
            stop.wait(args.step_delay)  # a slower machine: part of the step's computation
        with torch.no_grad():
            loss = loss_fn(model(x), y).item()  # the whole set, at the parameters used
        rows = torch.as_tensor(rng.integers(0, len(x), size=batch))
        model.zero_grad()
        loss_fn(model(x[rows]), y[rows]).backward()
        grads = [p.grad.detach().clone() for p in params]
        step += 1
        now = time.time()
        print("SPOTDNN_SAMPLE step=%d wall_time_s=%.3f iteration_time_s=%.6f "
              "communication_time_s=%.6f loss=%.6f batch_size=%d bytes_sent=%d bytes_received=%d "
              "parameter_servers=%d" % (step, now, now - started, communication, loss, batch, sent,
                                        received, servers), flush=True)
    # Hand in the last gradient so the servers count the step.
    if grads is not None and not stop.is_set():
        for i, conn in enumerate(conns):
            try:
                conn.send(("push", [grads[j].numpy() for j in shards[i]]))
                conn.recv()
            except (EOFError, OSError):
                pass
    log("worker %d stopped after %d steps" % (index, step))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", default=env("SPOTDNN_ROLE", "worker"), choices=["ps", "worker"])
    parser.add_argument("--lr", type=float, default=0.2, help="learning rate (parameter server)")
    parser.add_argument("--batch", type=int, default=32,
                        help="batch size when $SPOTDNN_BATCH_SIZE is not set")
    parser.add_argument("--checkpoint-every", type=float, default=2.0,
                        help="seconds between the parameter server's checkpoints")
    parser.add_argument("--step-delay", type=float, default=0.0,
                        help="seconds added to each worker step's computation (a slower machine)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    stop = threading.Event()

    taken = {"notice": None}  # the notice file's content at the notice already taken

    def on_notice(signum, _frame):
        notice = env("SPOTDNN_NOTICE_FILE")
        content = None
        if notice and os.path.exists(notice):
            with open(notice) as f:
                content = f.read().strip()
        if content and content != taken["notice"]:
            taken["notice"] = content
            log("revocation notice (signal %d): %s" % (signum, content))
            if args.role == "worker":
                # A worker keeps nothing: it trains on until the instance goes (a later signal
                # with no new notice is the instance's stop).
                return
            # A parameter server writes its last checkpoint now, for its replacement.
        else:
            log("stopping (signal %d)" % signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_notice)
    signal.signal(signal.SIGINT, on_notice)
    if args.role == "ps":
        servers = int(env("SPOTDNN_PARAMETER_SERVERS", "0") or 0) or max(
            1, len([a for a in env("SPOTDNN_PS_ADDRESSES").split(",") if a]))
        ps = ParameterServer(int(env("SPOTDNN_INDEX", "0")), servers, args.lr,
                             env("SPOTDNN_CHECKPOINT_DIR"), args.checkpoint_every)
        ps.run(int(env("SPOTDNN_PS_PORT", "2222")), stop)
    else:
        run_worker(args, stop)


if __name__ == "__main__":
    main()
