"""One rank of a hand-sharded tensor-parallel MLP (Megatron style: the
first layer split by output rows, the second by input columns, an
all-reduce between), for test_tp_reshard.py.

    tp_trainer.py save --work DIR --ckpt PATH --out DIR   (TP = world size)
        train 3 steps with Adam, async-save the model and optimizer through
        dcp.pytorch, dump this rank's tensors with their offsets, then take
        one more step and record its loss
    tp_trainer.py load --work DIR --ckpt PATH --out DIR
        build the model at this world's TP degree from other initial
        weights, load the checkpoint (resharded), dump the tensors, take
        the same next step and record its loss

The dump (OUT/rank<r>.pt) maps each item name to (offset, tensor).
"""

import argparse

import torch
import torch.distributed as dist

import dcp
import dcp.pytorch as dt
from dcp_testkit import file_context, finish_rank, init_rank, run_trainer

D, F = 6, 20  # model width and hidden width (F splits 4 and 2 ways)


class _ReduceSum(torch.autograd.Function):
    """All-reduce (sum) in forward, identity in backward (every rank's loss
    is the same function of the reduced output)."""

    @staticmethod
    def forward(ctx, x):
        y = x.clone()
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx, g):
        return g


class TPMLP(torch.nn.Module):
    """y = relu(x W1^T + b1) W2^T + b2 with W1, b1 split by rows and W2 by
    columns over a 1-d mesh of tp ranks; b2 replicated."""

    def __init__(self, tp, rank, seed):
        super().__init__()
        self.rows = dcp.Layout([tp], [1, 0])  # tensor dim 0 split over the mesh
        self.cols = dcp.Layout([tp], [0, 1])
        self.vec = dcp.Layout([tp], [1])
        g = torch.Generator().manual_seed(seed)
        w1, b1 = torch.randn(F, D, generator=g) * 0.3, torch.randn(F, generator=g) * 0.1
        w2, b2 = torch.randn(D, F, generator=g) * 0.3, torch.zeros(D)
        (r0, _), (rn, _) = self.rows.box((F, D), rank)
        self.w1 = torch.nn.Parameter(w1[r0:r0 + rn].clone())
        self.b1 = torch.nn.Parameter(b1[r0:r0 + rn].clone())
        self.w2 = torch.nn.Parameter(w2[:, r0:r0 + rn].clone())
        self.b2 = torch.nn.Parameter(b2)

    def forward(self, x):
        h = torch.relu(x @ self.w1.t() + self.b1)
        return _ReduceSum.apply(h @ self.w2.t()) + self.b2

    def dcp_shards(self):
        return {"w1": dt.Shard((F, D), self.rows), "b1": dt.Shard((F,), self.vec),
                "w2": dt.Shard((D, F), self.cols)}


def batch(step):
    g = torch.Generator().manual_seed(500 + step)
    return torch.randn(16, D, generator=g), torch.randn(16, D, generator=g)


def train_step(model, opt, step):
    x, y = batch(step)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def dump(model, opt, rank):
    """name -> (offset, tensor) of the model and the optimizer state."""
    specs = model.dcp_shards()

    def offset(name, t):
        spec = specs.get(name)
        if spec is None or tuple(t.shape) == ():
            return (0,) * t.dim()
        return spec.layout.box(spec.global_shape, rank)[0]

    out = {}
    names = {id(p): n for n, p in model.named_parameters()}
    for n, t in model.state_dict().items():
        out["model." + n] = (offset(n, t), t.clone())
    for p, st in opt.state.items():
        for k, v in st.items():
            out["optim.%s.%s" % (names[id(p)], k)] = (offset(names[id(p)], v), v.clone())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["save", "load"])
    ap.add_argument("--work", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rank, world = init_rank(a.work)
    ctx = file_context(a.work, rank, world)

    model = TPMLP(world, rank, seed=7 if a.mode == "save" else 8)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if a.mode == "save":
        for step in range(3):
            train_step(model, opt, step)
        fut = dt.async_save(ctx, a.ckpt, model=model, optimizer=opt, extra={"step": 3})
        fut.wait()
        del fut
    else:
        assert dt.load(ctx, a.ckpt, model=model, optimizer=opt, rng=False) == {"step": 3}
    tensors = dump(model, opt, rank)
    loss = train_step(model, opt, 3)
    finish_rank(ctx, a.out, rank, {"tensors": tensors, "loss3": loss})


if __name__ == "__main__":
    run_trainer(main)
