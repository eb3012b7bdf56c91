"""One rank of a fully sharded training job, for test_torch_dist.py,
launched as torchrun launches (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT in the environment; init_process_group("gloo") reads them).

Every parameter is split by rows over the ranks, as FSDP's
SHARDED_STATE_DICT presents it: the state_dict holds ShardedTensors (torch
1.13's, built with init_from_local_shards), and so does the optimizer
state keyed by parameter fqn. Each step gathers the full parameters
(all_gather: exact copies), runs forward and backward on the whole batch
(the same on every rank), and lets Adam update this rank's rows of each
parameter. Nothing depends on the world size but which rows a rank owns,
so a run resumed at another world size has the same losses bit for bit.
(torch 1.13's FSDP itself needs CUDA: this is its state, on CPU.)

    sharded_trainer.py MODE --ckpt DIR --out FILE --steps N --save-at K
    MODE run     train N steps from scratch; async-save (dcp.torch) at K
    MODE resume  load DIR (saved at K by another world size), train to N
Results (OUT.<rank>.pt): the losses by step, the full parameters at the end.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import dcp
import dcp.torch as dcp_torch
from dcp import _torch_compat

_torch_compat.ensure()
from torch.distributed._shard.metadata import ShardMetadata  # noqa: E402
from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards  # noqa: E402

SHAPES = {"fc1.weight": (16, 8), "fc1.bias": (16,), "fc2.weight": (4, 16), "fc2.bias": (4,)}


def rows(name, rank, world):
    n = SHAPES[name][0] // world
    return rank * n, n


def sharded(local, name, rank, world):
    """A ShardedTensor of the global parameter `name` whose rows this rank holds."""
    start, n = rows(name, rank, world)
    shape = SHAPES[name]
    md = ShardMetadata(shard_offsets=[start] + [0] * (len(shape) - 1),
                       shard_sizes=[n] + list(shape[1:]), placement="rank:%d/cpu" % rank)
    return init_from_local_shards([Shard(local, md)], *shape)


def full_init():
    torch.manual_seed(7)
    return {"fc1.weight": torch.randn(16, 8) * 0.3, "fc1.bias": torch.zeros(16),
            "fc2.weight": torch.randn(4, 16) * 0.3, "fc2.bias": torch.zeros(4)}


def gather(local, name, world):
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local.detach().contiguous())
    return torch.cat(parts, 0)


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)


def state_dict(params, opt, rank, world, step):
    """The SHARDED_STATE_DICT-style state: ShardedTensors, optimizer state by fqn."""
    model = {n: sharded(p.data, n, rank, world) for n, p in params.items()}
    state = {}
    for n, p in params.items():
        st = opt.state.get(p, {})
        state[n] = {k: sharded(v, n, rank, world) if torch.is_tensor(v) and v.dim() else v
                    for k, v in st.items()}
    groups = [dict({k: v for k, v in g.items() if k != "params"}, params=list(params))
              for g in opt.param_groups]
    return {"model": model, "optim": {"state": state, "param_groups": groups}, "step": step}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["run", "resume"])
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--save-at", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo")  # env://, as under torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    if world > 1:  # a plain Context() in a multi-process job is refused
        try:
            dcp.Context()
            raise SystemExit("dcp.Context() was accepted with WORLD_SIZE=%d" % world)
        except dcp.InvalidError as e:
            assert "from_env" in str(e), e
    init = full_init()
    params = {}
    for n, t in init.items():
        start, cnt = rows(n, rank, world)
        params[n] = torch.nn.Parameter(t[start:start + cnt].clone())
    opt = torch.optim.Adam(params.values(), lr=0.05)
    first = 0
    if a.mode == "resume":
        # empty destinations of this world size's shards; the optimizer's
        # state is created first so that the load fills it in place
        dcp_torch._init_optim_state(opt)
        sd = state_dict(params, opt, rank, world, -1)
        dcp_torch.load(sd, checkpoint_id=a.ckpt)
        for n, p in params.items():
            for k, v in sd["optim"]["state"][n].items():
                if not torch.is_tensor(v) or v.dim() == 0:
                    opt.state[p][k] = v
        first = sd["step"]
        assert first == a.save_at, first
    losses, pending = {}, None
    for step in range(first, a.steps):
        if a.mode == "run" and step == a.save_at:
            pending = dcp_torch.async_save(state_dict(params, opt, rank, world, step),
                                           checkpoint_id=a.ckpt)
            assert pending.staging_completion.done()
        full = {n: gather(p, n, world).requires_grad_() for n, p in params.items()}
        x, y = batch(step)
        h = F.relu(F.linear(x, full["fc1.weight"], full["fc1.bias"]))
        loss = F.mse_loss(F.linear(h, full["fc2.weight"], full["fc2.bias"]), y)
        loss.backward()
        for n, p in params.items():
            start, cnt = rows(n, rank, world)
            p.grad = full[n].grad[start:start + cnt].clone()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses[step] = loss.item()
    if pending is not None:
        pending.result()
        assert pending.done() and pending.exception() is None
    if a.mode == "resume":
        # the directory fallback agreed through the process group (rank 0's
        # mkdtemp, broadcast): a small save over that context
        import numpy as np
        with dcp.Context.from_env(rendezvous="dir", async_writers=False) as c2:
            part = np.full(2, rank, np.int32)
            dcp.save(c2, {"r": dcp.Chunk(part, (2 * rank,), (2 * world,))}, a.ckpt + ".dir")
    final = {n: gather(p, n, world) for n, p in params.items()}
    torch.save({"losses": losses, "params": final}, "%s.%d.pt" % (a.out, rank))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
