"""Attacks on dcp.torch at 2 ranks, launched as torchrun launches (the
variables alone, dcp.Context.from_env() over the TCP store): ranks that
disagree on a value, a shape, a dtype or what a key is; a plain tensor
that differs between ranks under check_replicas=True; keys only one rank
has; an async save whose tensors change as soon as it returns. Every
failed save must fail on both ranks and commit nothing. Run: python3
this file."""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launch  # noqa: E402

RANKS = r'''
import os, sys, torch, dcp
import dcp.torch as dt
rank = int(os.environ["RANK"])
root = os.environ["CKPT"]
ctx = dcp.Context.from_env(timeout_ms=60000)


def refused(name, sd, error, text, **options):
    path = os.path.join(root, name)
    try:
        dt.save(sd, checkpoint_id=path, ctx=ctx, **options)
    except error as e:
        assert text in str(e), (name, rank, str(e))
    else:
        raise SystemExit("%s: rank %d saved" % (name, rank))
    assert not dcp.committed(ctx, path), name


# the ranks disagree: every rank raises, nothing is committed
refused("value", {"v": rank, "t": torch.ones(2)}, dcp.ScopeError, "'v'")
refused("shape", {"x": torch.ones(2 + rank)}, dcp.MismatchError, "'x'")
refused("dtype", {"x": torch.ones(2, dtype=(torch.float64, torch.float32)[rank])},
        dcp.MismatchError, "'x'")
refused("kind", {"x": torch.ones(2) if rank else 5}, dcp.MismatchError, "'x'")
refused("replicas", {"w": torch.full((4,), float(rank))}, dcp.ReplicaError, "'w'",
        check_replicas=True)

# keys only one rank has: saved, and both ranks load both
path = os.path.join(root, "own")
dt.save({"only%d" % rank: torch.full((2,), float(rank)), "both": torch.arange(3.)},
        checkpoint_id=path, ctx=ctx)
got = {"only0": torch.zeros(2), "only1": torch.zeros(2), "both": torch.zeros(3)}
dt.load(got, checkpoint_id=path, ctx=ctx)
assert [float(got["only%d" % r][0]) for r in (0, 1)] == [0.0, 1.0], got
assert torch.equal(got["both"], torch.arange(3.))

# an async save: the tensors change as soon as it returns (a key of each
# rank's own and a replicated one)
x = torch.arange(1 << 20, dtype=torch.float32) + rank
want = x.clone()
fut = dt.async_save({"x%d" % rank: x, "common": torch.ones(4)},
                    checkpoint_id=os.path.join(root, "async"), ctx=ctx)
x.mul_(-1)
fut.result()
got = {"x0": torch.zeros(1 << 20), "x1": torch.zeros(1 << 20)}
dt.load(got, checkpoint_id=os.path.join(root, "async"), ctx=ctx, strict=False)
assert torch.equal(got["x%d" % rank], want), rank
assert torch.equal(got["x%d" % (1 - rank)], torch.arange(1 << 20, dtype=torch.float32) + 1 - rank)
print("rank %d: all attacks held" % rank)
sys.stdout.flush()
ctx.async_shutdown()
ctx.close()
os._exit(0)
'''


class Dist(unittest.TestCase):
    def test_two_ranks_that_disagree(self):
        with tempfile.TemporaryDirectory(prefix="dcp-attack-dist-") as tmp:
            script = os.path.join(tmp, "ranks.py")
            with open(script, "w") as f:
                f.write(RANKS)
            job = launch.Job(script, 2, [], os.path.join(tmp, "w"), torchrun=True,
                             env={"CKPT": tmp, "TMPDIR": tmp}).start()
            job.wait(60)


if __name__ == "__main__":
    unittest.main(verbosity=2)
