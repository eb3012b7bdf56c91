"""Multi-rank dcp.torch, launched as torchrun launches (every torchrun
variable in the environment, torch.distributed over gloo):

* a fully sharded run (ShardedTensor state, optimizer state by fqn) at 4
  ranks async-saves at step 3 through dcp.Context.from_env() (gloo over
  the TCP store at MASTER_ADDR, no shared directory) and goes on;
  a 2-rank job resumes from that checkpoint: its losses and final
  parameters equal the uninterrupted run's bit for bit;
* from_env without a process group (the variables alone), over the TCP
  store and over the directory fallback, saves, async-saves and loads a
  sharded tensor at 2 ranks; a plain dcp.Context() there is refused.
Run: python3 this file."""

import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launch  # noqa: E402

STEPS, SAVE_AT = 6, 3

ENV_ONLY = r'''
import os, numpy as np, dcp
try:
    dcp.Context()
    raise SystemExit("plain Context() accepted")
except dcp.InvalidError as e:
    assert "WORLD_SIZE=2" in str(e) and "from_env" in str(e), e
w = np.arange(8, dtype=np.float32)
for rdv in ("store", "dir"):
    with dcp.Context.from_env(rendezvous=rdv) as ctx:
        assert (ctx.rank, ctx.world_size) == (int(os.environ["RANK"]), 2)
        mine = dcp.Chunk(w[4 * ctx.rank:4 * ctx.rank + 4].copy(), (4 * ctx.rank,), (8,))
        path = os.path.join(os.environ["CKPT"], rdv)
        fut = dcp.async_save(ctx, {"w": mine}, path)  # the writers' coordination is set
        fut.wait()
        del fut
        out = np.zeros(8, np.float32)
        dcp.load(ctx, {"w": out}, path)
        assert (out == w).all(), (rdv, out)
# a context without the writers' coordination: the error names the Python call
with dcp.Context.from_env(async_writers=False) as bare:
    try:
        dcp.async_save(bare, {"w": mine}, path + ".2")
        raise SystemExit("async_save without coordination was accepted")
    except dcp.InvalidError as e:
        assert "Context.set_async_coordination()" in str(e) and "dcp_async" not in str(e), e
'''


class Dist(unittest.TestCase):
    def test_sharded_4_ranks_resume_at_2_bit_exact(self):
        with tempfile.TemporaryDirectory(prefix="dcp-tdist-") as tmp:
            ckpt = os.path.join(tmp, "ckpt")
            script = os.path.join(HERE, "sharded_trainer.py")
            common = ["--ckpt", ckpt, "--steps", str(STEPS), "--save-at", str(SAVE_AT)]
            run = launch.Job(script, 4, ["run", "--out", os.path.join(tmp, "run")] + common,
                             os.path.join(tmp, "w-run"), torchrun=True).start()
            run.wait(240)
            res = launch.Job(script, 2, ["resume", "--out", os.path.join(tmp, "res")] + common,
                             os.path.join(tmp, "w-res"), torchrun=True,
                             env={"TMPDIR": tmp}).start()
            res.wait(240)
            import numpy as np
            import dcp
            got_r = np.zeros(4, np.int32)  # what the resumed ranks saved over the directory
            with dcp.Context() as c:
                dcp.load(c, {"r": got_r}, ckpt + ".dir")
            self.assertEqual(got_r.tolist(), [0, 0, 1, 1])
            want = torch.load(os.path.join(tmp, "run.0.pt"))
            for r in range(2):
                got = torch.load(os.path.join(tmp, "res.%d.pt" % r))
                self.assertEqual(sorted(got["losses"]), list(range(SAVE_AT, STEPS)))
                for s in range(SAVE_AT, STEPS):
                    self.assertEqual(want["losses"][s], got["losses"][s], "rank %d step %d" % (r, s))
                for n, t in want["params"].items():
                    self.assertTrue(torch.equal(t, got["params"][n]), "rank %d: %s" % (r, n))

    def test_from_env_without_process_group(self):
        # one job: the TCP store at MASTER_ADDR:MASTER_PORT+1 (+2 for the
        # writers), then the directory fallback agreed from MASTER_ADDR/PORT
        with tempfile.TemporaryDirectory(prefix="dcp-tenv-") as tmp:
            script = os.path.join(tmp, "env_only.py")
            with open(script, "w") as f:
                f.write(ENV_ONLY)
            job = launch.Job(script, 2, [], os.path.join(tmp, "w"), torchrun=True,
                             env={"CKPT": tmp, "TMPDIR": tmp}).start()  # the agreed directory
            job.wait(120)


if __name__ == "__main__":
    unittest.main(verbosity=2)
