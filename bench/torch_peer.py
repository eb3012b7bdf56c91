"""Peer comparison: the same sharded state saved and loaded by torch 1.13's
own distributed checkpoint (torch.distributed._shard.checkpoint) and by
libdcp (through the Python binding), in one run, on the same ranks and
directory. Prints one table: save seconds, async-save blocking seconds,
load seconds into a changed sharding, bytes on disk.

    /usr/bin/python3 bench/torch_peer.py [--world 4] [--mib 256] [--tensors 8]
                                         [--dir DIR] [--quick] [--dedup auto|on|off]

It starts --world rank processes of itself (torch.distributed over gloo,
file rendezvous). The state is --tensors float32 matrices [R, C] of --mib
MiB in all, sharded by rows over the ranks (ShardedTensor with
ChunkShardingSpec-style row shards for torch; a dcp.Layout for libdcp),
with values computed from the global element index. Both load it sharded
by columns, and both loads are checked element by element (the run fails
on a wrong value). Before each load every checkpoint file is synced and
dropped from the page cache (posix_fadvise DONTNEED). Times are the
slowest rank's, between barriers. torch 1.13 imports its checkpoint module
through bench/torch_dcp_shim.py (a Python 3.11 dataclass fix, see there).
torch 1.13 has no async save, so that row is libdcp's alone. --quick (a
small state) is what ctest runs (python.torch_peer).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--mib", type=int, default=256, help="state size in MiB")
    ap.add_argument("--tensors", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="repetitions; medians are printed")
    ap.add_argument("--dir", help="checkpoint directory (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="8 MiB, for the test suite")
    ap.add_argument("--dedup", choices=("auto", "on", "off"), default="auto",
                    help="libdcp's read_dedup for the load (default auto)")
    a = ap.parse_args()
    if a.quick:
        a.mib, a.tensors, a.repeat = 8, 4, 1
    return a


# ------------------------------------------------------------- launcher --


def launch(a):
    """Run the ranks; return rank 0's exit status."""
    root = a.dir or tempfile.mkdtemp(prefix="dcp-peer-")
    os.makedirs(root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="dcp-peer-work-")
    procs = []
    for r in range(a.world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.world), OMP_NUM_THREADS="1",
                   DCP_PEER_ROOT=root, DCP_PEER_WORK=work)
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                                      env=env))
    codes = [p.wait() for p in procs]
    shutil.rmtree(work, ignore_errors=True)
    if not a.dir:
        shutil.rmtree(root, ignore_errors=True)
    if any(codes):
        print("torch_peer: ranks exited with %s" % codes, file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------- ranks --


def shape_of(a):
    """[R, C] per tensor: R and C multiples of the world, about mib/tensors MiB."""
    elems = a.mib * (1 << 20) // 4 // a.tensors
    cols = 1024 if elems >= 1024 * 1024 else 256
    rows = max(a.world, elems // cols // a.world * a.world)
    return rows, cols


def expected(torch, k, r0, rn, c0, cn, cols):
    """Values of tensor k in rows [r0, r0+rn), columns [c0, c0+cn)."""
    i = torch.arange(r0, r0 + rn, dtype=torch.int64).unsqueeze(1) * cols + \
        torch.arange(c0, c0 + cn, dtype=torch.int64).unsqueeze(0)
    return ((i * 2654435761 + k * 97) % 100003).to(torch.float32) * 1e-3


def evict(root):
    """fsync and drop every file under root from the page cache."""
    for d, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def disk_bytes(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


class Rank:
    def __init__(self, a):
        import torch
        import torch.distributed as dist
        sys.path.insert(0, HERE)
        import torch_dcp_shim
        torch_dcp_shim.install()
        import torch.distributed._shard.checkpoint as tcp
        from torch.distributed._shard.metadata import ShardMetadata
        from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards
        import dcp
        self.torch, self.dist, self.tcp, self.dcp = torch, dist, tcp, dcp
        self.ShardMetadata, self.Shard, self.init_from_local_shards = \
            ShardMetadata, Shard, init_from_local_shards
        self.a = a
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.root, work = os.environ["DCP_PEER_ROOT"], os.environ["DCP_PEER_WORK"]
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="file://" + os.path.join(work, "pg"),
                                rank=self.rank, world_size=self.world)
        rdv = os.path.join(work, "rdv")
        os.makedirs(rdv, exist_ok=True)
        try:  # gloo like torch; the file collective where that plugin is not built
            self.coll = "gloo"
            self.ctx = dcp.Context(rank=self.rank, world_size=self.world, coll="gloo",
                                   rendezvous=rdv, timeout_ms=600000)
        except dcp.PluginError:
            self.coll = "file"
            self.ctx = dcp.Context(rank=self.rank, world_size=self.world, coll="file",
                                   rendezvous=rdv, timeout_ms=600000)
        self.ctx.set_async_coordination(self.coll, rdv)
        self.rows, self.cols = shape_of(a)
        self.names = ["layer%d.weight" % k for k in range(a.tensors)]
        self.warm = False

    # the row shard (save) and the column shard (load) of this rank
    def row_box(self):
        n = self.rows // self.world
        return self.rank * n, n, 0, self.cols

    def col_box(self):
        n = self.cols // self.world
        return 0, self.rows, self.rank * n, n

    def local(self, k, box):
        return expected(self.torch, k, box[0], box[1], box[2], box[3], self.cols)

    def sharded(self, tensors, box):
        """ShardedTensors of the local tensors, which hold `box` on each rank."""
        out = {}
        for name, t in zip(self.names, tensors):
            md = self.ShardMetadata(shard_offsets=[box[0], box[2]], shard_sizes=[box[1], box[3]],
                                    placement="rank:%d/cpu" % self.rank)
            out[name] = self.init_from_local_shards([self.Shard(t, md)], self.rows, self.cols)
        return out

    def timed(self, fn):
        """The slowest rank's time of fn, between barriers."""
        self.dist.barrier()
        t0 = time.monotonic()
        fn()
        t = self.torch.tensor([time.monotonic() - t0], dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.item()

    def check(self, tensors, box, who):
        for k, t in enumerate(tensors):
            if not self.torch.equal(t, self.local(k, box)):
                raise SystemExit("%s: wrong values in %s on rank %d" % (who, self.names[k],
                                                                        self.rank))

    def evict_all(self):
        self.dist.barrier()
        if self.rank == 0:
            evict(self.root)
        self.dist.barrier()

    def fresh(self, name):
        """An empty directory for this repetition's checkpoint `name`."""
        path = os.path.join(self.root, name)
        self.dist.barrier()
        if self.rank == 0:
            shutil.rmtree(path, ignore_errors=True)
        self.dist.barrier()
        return path

    def run_torch(self):
        path = self.fresh("torch")
        rows = [self.local(k, self.row_box()) for k in range(len(self.names))]
        sd = self.sharded(rows, self.row_box())
        save = self.timed(lambda: self.tcp.save_state_dict(sd, self.tcp.FileSystemWriter(path)))
        self.evict_all()
        cols = [self.torch.zeros(self.rows, self.cols // self.world) for _ in self.names]
        dest = self.sharded(cols, self.col_box())
        load = self.timed(lambda: self.tcp.load_state_dict(dest, self.tcp.FileSystemReader(path)))
        self.check(cols, self.col_box(), "torch")
        return {"save": save, "block": None, "persist": None, "load": load,
                "bytes": disk_bytes(path) if self.rank == 0 else 0}

    def dcp_items(self, tensors, layout):
        return {n: self.dcp.Sharded(t.numpy(), (self.rows, self.cols), layout)
                for n, t in zip(self.names, tensors)}

    def run_dcp(self):
        dcp = self.dcp
        path, apath = self.fresh("dcp"), self.fresh("dcp-async")
        by_rows, by_cols = dcp.Layout([self.world], [1, 0]), dcp.Layout([self.world], [0, 1])
        rows = [self.local(k, self.row_box()) for k in range(len(self.names))]
        items = self.dcp_items(rows, by_rows)
        save = self.timed(lambda: dcp.save(self.ctx, items, path))
        if not self.warm:  # the first async save starts the writer and maps its pool
            dcp.async_save(self.ctx, items, self.fresh("dcp-async-warmup")).wait()
            self.warm = True
        fut = []
        block = self.timed(lambda: fut.append(dcp.async_save(self.ctx, items, apath)))
        persist = self.timed(lambda: fut[0].wait())
        del fut[:]
        self.evict_all()
        cols = [self.torch.zeros(self.rows, self.cols // self.world) for _ in self.names]
        dest = self.dcp_items(cols, by_cols)
        dedup = getattr(dcp, "READ_DEDUP_" + self.a.dedup.upper())
        load = self.timed(lambda: dcp.load(self.ctx, dest, path, read_dedup=dedup))
        self.check(cols, self.col_box(), "libdcp")
        return {"save": save, "block": block, "persist": persist, "load": load,
                "bytes": disk_bytes(path) if self.rank == 0 else 0}

    def close(self):
        self.ctx.async_shutdown()
        self.ctx.close()
        self.dist.barrier()


def fmt(v, unit):
    if v is None:
        return "n/a"
    if unit == "s":
        return "%.3f" % v
    return "%d" % v


def report(a, rank, t, d):
    print("\npeer comparison: %d ranks, %d float32 tensors [%d, %d], %.1f MiB, saved by rows,"
          " loaded by columns; libdcp over its %s collective" % (
              rank.world, a.tensors, rank.rows, rank.cols,
              a.tensors * rank.rows * rank.cols * 4 / (1 << 20), rank.coll))
    rows = [("save (s)", "save", "s"), ("async save: blocking (s)", "block", "s"),
            ("async save: until persisted (s)", "persist", "s"),
            ("load, rows -> columns (s)", "load", "s"), ("bytes on disk", "bytes", "b")]
    w = max(len(r[0]) for r in rows)
    print("| %-*s | %-16s | %-16s |" % (w, "", "torch 1.13 DCP", "libdcp"))
    print("|%s|%s|%s|" % ("-" * (w + 2), "-" * 18, "-" * 18))
    for label, key, unit in rows:
        print("| %-*s | %-16s | %-16s |" % (w, label, fmt(t[key], unit), fmt(d[key], unit)))
    print("(medians of %d; torch 1.13 has no async save; libdcp's async figures are a"
          " second async save: the first starts the writer and maps its pool)" % a.repeat)
    sys.stdout.flush()


def median(runs):
    """Per key, the median over the repetitions (None stays None)."""
    out = {}
    for k in runs[0]:
        vals = sorted(r[k] for r in runs) if runs[0][k] is not None else None
        out[k] = None if vals is None else vals[len(vals) // 2]
    return out


def ratio_lines(t, d):
    """For tools/dev.sh bench: torch time / libdcp time per repetition (each
    against the same repetition's), as RATIO|key|median|min|max|n|target|what."""
    for key, what in (("save", "save"), ("load", "load rows -> columns")):
        v = sorted(tr[key] / dr[key] for tr, dr in zip(t, d))
        n = len(v)
        med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
        print("RATIO|peer.%s|%.3f|%.3f|%.3f|%d|>= 2|torch 1.13 DCP time / libdcp time, %s"
              % (key, med, v[0], v[-1], n, what))
    sys.stdout.flush()


def rank_main(a):
    r = Rank(a)
    t, d = [], []
    for i in range(a.repeat):  # alternate who goes first
        if i % 2 == 0:
            t.append(r.run_torch())
            d.append(r.run_dcp())
        else:
            d.append(r.run_dcp())
            t.append(r.run_torch())
    if r.rank == 0:
        report(a, r, median(t), median(d))
        ratio_lines(t, d)
    r.close()


if __name__ == "__main__":
    args = parse()
    if "RANK" not in os.environ:
        sys.exit(launch(args))
    rank_main(args)
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's gloo teardown can hang at exit (tests/python/ddp_trainer.py)
