"""One rank of a small DDP training job (torch.distributed over gloo), for
test_ddp_resume.py. Deterministic: fixed seeds, deterministic algorithms,
one thread, and batches generated from (step, rank) by a fresh generator,
so nothing depends on a random state that is not in the checkpoint. The
model has dropout, so the per-rank RNG state in the checkpoint matters.

    ddp_trainer.py MODE --work DIR --ckpt ROOT --out DIR --steps N --every K

MODE ref     train N steps without saving, write the results
     kill    train, async-saving every K steps into ROOT/step-<s>; after each
             save has persisted write DIR/persisted-<s>.<rank>; slow down
             once a save has persisted; never exit (the test kills the job)
     resume  load the latest committed checkpoint under ROOT, train to N,
             async-saving as `kill` does, and write the results

Results (OUT/rank<r>.pt): the model's and the optimizer's state_dict, the
losses by step, and the step resumed from.
"""

import argparse
import os
import random
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import dcp.pytorch as dt
from dcp_testkit import file_context, finish_rank, init_rank, run_trainer


def make_model():
    torch.manual_seed(1234)  # the same initial weights on every rank
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.25),
                               torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def per_param_allreduce(_, bucket):
    """DDP comm hook: average each parameter's gradient on its own.

    DDP's own hook all-reduces a whole bucket, and where a gradient element
    sits in the bucket decides the order in which gloo's ring adds the ranks'
    values. DDP lays its buckets out again after the first iteration of each
    process, which in a resumed job is a different step than in the
    uninterrupted one, so the sums would differ in the last bit. Reduced one
    parameter at a time, the order depends on that parameter alone."""
    buf, off = bucket.buffer(), 0
    world = dist.get_world_size()
    for p in bucket.parameters():
        seg = buf[off:off + p.numel()]
        part = seg.div(world)  # exact: the world is a power of two
        dist.all_reduce(part)
        seg.copy_(part)
        off += p.numel()
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def batch(step, rank):
    g = torch.Generator().manual_seed(step * 1000 + rank)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["ref", "kill", "resume"])
    ap.add_argument("--work", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--every", type=int, default=3)
    a = ap.parse_args()
    rank, world = init_rank(a.work)
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    model.register_comm_hook(None, per_param_allreduce)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    torch.manual_seed(100 + rank)  # per-rank streams: dropout differs by rank
    np.random.seed(200 + rank)
    random.seed(300 + rank)

    ctx = file_context(a.work, rank, world)

    start = 0
    if a.mode == "resume":
        path = dt.latest_checkpoint(ctx, a.ckpt)
        start = dt.load(ctx, path, model=model, optimizer=opt, scheduler=sched)["step"]
        print("rank %d resumed from %s at step %d" % (rank, path, start), flush=True)

    pending, fut, persisted, losses = None, None, 0, {}

    def mark(fut_step):
        with open(os.path.join(a.work, "persisted-%d.%d" % (fut_step, rank)), "w"):
            pass

    for step in range(start, a.steps):
        x, y = batch(step, rank)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses[step] = loss.item()
        done = step + 1
        if a.mode != "ref" and done % a.every == 0 and done < a.steps:
            if pending:
                pending[1].wait()
                mark(pending[0])
                persisted = pending[0]
            fut = dt.async_save(ctx, os.path.join(a.ckpt, "step-%d" % done), model=model,
                                optimizer=opt, scheduler=sched, extra={"step": done})
            pending = (done, fut)
        if pending and pending[1].done():
            pending[1].wait()
            mark(pending[0])
            persisted, pending = pending[0], None
        if a.mode == "kill" and persisted:
            time.sleep(0.2)  # let the kill land in the middle of training
    if pending:
        pending[1].wait()
        mark(pending[0])
    if a.mode == "kill":
        print("rank %d: trained to the end; waiting to be killed" % rank, flush=True)
        while True:
            time.sleep(1)

    results = {"model": model.module.state_dict(), "optim": opt.state_dict(),
               "losses": losses, "start": start}
    del fut, pending  # the handles use the context
    finish_rank(ctx, a.out, rank, results)


if __name__ == "__main__":
    run_trainer(main)
