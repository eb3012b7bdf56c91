"""What the binding's tests share. The scripts of this folder run as
`python3 FILE`, so the folder is first on sys.path and they import this
module by name.

DcpCase: a unittest case with a fresh temporary directory (self.dir,
self.path(name)) and a single-rank dcp.Context (self.ctx) per test, both
gone after it. The trainer ranks of ddp_trainer.py and tp_trainer.py
(launched by launch.py, torchrun's environment): init_rank, file_context,
finish_rank and run_trainer. torch is imported by those functions only, so
the tests without torch can use DcpCase."""

import os
import sys
import tempfile
import unittest

import dcp


class DcpCase(unittest.TestCase):
    tmp_prefix = "dcp-py-"  # a subclass names its own

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix=self.tmp_prefix)
        self.dir = self.tmp.name
        self.ctx = dcp.Context()

    def tearDown(self):
        self.ctx.close()
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)


def init_rank(work):
    """This rank of a torchrun-style job: (rank, world) from the
    environment, stacks on SIGUSR1 (for a hang), one deterministic thread,
    and the gloo process group meeting in WORK/pg."""
    import faulthandler
    import signal

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, "pg"),
                            rank=rank, world_size=world)
    return rank, world


def file_context(work, rank, world):
    """A dcp.Context over the file collective in WORK/rdv, its async
    writers coordinating there too."""
    rdv = os.path.join(work, "rdv")
    os.makedirs(rdv, exist_ok=True)
    ctx = dcp.Context(rank=rank, world_size=world, coll="file", rendezvous=rdv,
                      timeout_ms=120000)
    ctx.set_async_coordination("file", rdv)
    return ctx


def finish_rank(ctx, out, rank, results):
    """Write this rank's results to OUT/rank<R>.pt, close the context (its
    writer first) and wait for every rank."""
    import torch
    import torch.distributed as dist

    torch.save(results, os.path.join(out, "rank%d.pt" % rank))
    ctx.async_shutdown()
    ctx.close()
    dist.barrier()


def run_trainer(main):
    """Run a trainer's main, then leave without tearing torch down: torch
    1.13's gloo process group sometimes hangs in its destructor at
    interpreter exit (about 1 run in 15, in ranks that finished
    everything); the results are written and libdcp's context is closed by
    then."""
    main()
    sys.stdout.flush()
    os._exit(0)
