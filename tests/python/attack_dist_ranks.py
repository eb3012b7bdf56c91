"""The ranks of test_attack_torch_dist.py (launched by launch.py with
torchrun's variables, CKPT the directory to write under): every attack
runs on both ranks; an assertion or SystemExit fails the job."""

import os
import sys

import torch

import dcp
import dcp.pytorch as dp
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

# a load one rank refuses before the collective (a key the checkpoint
# lacks, a destination that cannot hold the values): that rank raises, the
# other loads, and both go on in step (the refusing rank took part in the
# collective load with nothing to load instead of leaving its peer waiting)
for bad in ({"gone": torch.zeros(1)}, {"both": torch.zeros(1).expand(3)}):
    got = {"both": torch.zeros(3)}
    if rank == 0:
        got.update(bad)
        try:
            dt.load(got, checkpoint_id=path, ctx=ctx)
        except (dcp.NotFoundError, dcp.InvalidError):
            pass
        else:
            raise SystemExit("rank 0 loaded %s" % list(bad))
    else:
        dt.load(got, checkpoint_id=path, ctx=ctx)
        assert torch.equal(got["both"], torch.arange(3.))

# the same through dcp.pytorch (a model buffer the checkpoint lacks on rank 0)
torch.manual_seed(0)
lin = torch.nn.Linear(2, 2)
dp.save(ctx, os.path.join(root, "pt"), model=lin, rng=False)
dest = torch.nn.Linear(2, 2)
if rank == 0:
    dest.register_buffer("extra", torch.zeros(1))
    try:
        dp.load(ctx, os.path.join(root, "pt"), model=dest, rng=False)
    except dcp.NotFoundError:
        pass
    else:
        raise SystemExit("rank 0 loaded a model with a buffer the checkpoint lacks")
else:
    dp.load(ctx, os.path.join(root, "pt"), model=dest, rng=False)
    assert torch.equal(dest.weight, lin.weight)

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
