"""Single-process tests of dcp.pytorch: a training state (model, Adam,
StepLR, RNG states, extras) saved and loaded back bit for bit, in place;
bf16 and integer tensors; DDP unwrapping; strictness and mismatches;
latest_checkpoint skipping an uncommitted save. Run: python3 this file."""

import os
import random
import tempfile
import unittest

import numpy as np
import torch

import dcp
import dcp.pytorch as dt


def make(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def train(model, opt, sched, steps):
    for s in range(steps):
        g = torch.Generator().manual_seed(1000 + s)
        x = torch.randn(5, 6, generator=g)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def state_bytes(model, opt):
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            out["opt.%d.%s" % (i, k)] = v.clone() if torch.is_tensor(v) else v
    return out


class Adapter(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="dcp-torch-")
        self.ctx = dcp.Context()

    def tearDown(self):
        self.ctx.close()
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def assertSameState(self, a, b):
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            if torch.is_tensor(a[k]):
                self.assertEqual(a[k].dtype, b[k].dtype, k)
                self.assertTrue(torch.equal(a[k], b[k]), k)
            else:
                self.assertEqual(a[k], b[k], k)

    def test_training_state_round_trip_bit_exact(self):
        model, opt, sched = make()
        train(model, opt, sched, 3)
        torch.manual_seed(77)
        np.random.seed(78)
        random.seed(79)
        saved = state_bytes(model, opt)
        dt.save(self.ctx, self.path("c"), model=model, optimizer=opt, scheduler=sched,
                extra={"step": 3, "losses": [0.5, 0.25], "pair": (1, 2)})
        expect_rng = (torch.rand(4), np.random.rand(3), random.random())
        m2, o2, s2 = make(seed=5)  # different weights, empty optimizer state
        extra = dt.load(self.ctx, self.path("c"), model=m2, optimizer=o2, scheduler=s2)
        self.assertEqual(extra, {"step": 3, "losses": [0.5, 0.25], "pair": (1, 2)})
        self.assertSameState(saved, state_bytes(m2, o2))
        self.assertEqual(o2.param_groups[0]["lr"], opt.param_groups[0]["lr"])
        self.assertEqual(o2.param_groups[0]["betas"], (0.9, 0.999))
        self.assertEqual(s2.state_dict(), sched.state_dict())
        self.assertTrue(torch.equal(torch.rand(4), expect_rng[0]))
        self.assertTrue(np.array_equal(np.random.rand(3), expect_rng[1]))
        self.assertEqual(random.random(), expect_rng[2])
        # one more step on both (from the same RNG state) gives identical weights
        rng = torch.get_rng_state()
        train(model, opt, sched, 1)
        torch.set_rng_state(rng)
        train(m2, o2, s2, 1)
        self.assertSameState(state_bytes(model, opt), state_bytes(m2, o2))
        kv = dcp.meta_open(self.ctx, self.path("c")).kv()
        self.assertTrue(kv["framework"].startswith("torch"))

    def test_load_is_in_place(self):
        model, opt, sched = make()
        train(model, opt, sched, 2)
        dt.save(self.ctx, self.path("c"), model=model, optimizer=opt, scheduler=sched)
        saved = state_bytes(model, opt)
        train(model, opt, sched, 2)  # move away; the optimizer keeps its tensors
        w = model[0].weight
        exp_avg = opt.state[w]["exp_avg"]
        ptrs = (w.data_ptr(), exp_avg.data_ptr())
        dt.load(self.ctx, self.path("c"), model=model, optimizer=opt, scheduler=sched)
        self.assertIs(opt.state[w]["exp_avg"], exp_avg)
        self.assertEqual((w.data_ptr(), opt.state[w]["exp_avg"].data_ptr()), ptrs)
        self.assertSameState(saved, state_bytes(model, opt))

    def test_bf16_int_and_bool_tensors(self):
        m = torch.nn.Module()
        m.register_buffer("h", torch.linspace(-3, 3, 10).to(torch.bfloat16))
        m.register_buffer("n", torch.arange(7, dtype=torch.int64))
        m.register_buffer("mask", torch.tensor([True, False, True]))
        dt.save(self.ctx, self.path("c"), model=m, rng=False)
        info = dcp.meta_open(self.ctx, self.path("c")).tensor("model.h")
        self.assertEqual(info["dtype"], dcp.BF16)
        m2 = torch.nn.Module()
        m2.register_buffer("h", torch.zeros(10, dtype=torch.bfloat16))
        m2.register_buffer("n", torch.zeros(7, dtype=torch.int64))
        m2.register_buffer("mask", torch.zeros(3, dtype=torch.bool))
        dt.load(self.ctx, self.path("c"), model=m2, rng=False)
        for k in ("h", "n", "mask"):
            self.assertTrue(torch.equal(getattr(m2, k), getattr(m, k)), k)

    def test_ddp_is_unwrapped(self):
        import torch.distributed as dist
        store = dist.FileStore(self.path("pg"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        try:
            model, opt, sched = make()
            ddp = torch.nn.parallel.DistributedDataParallel(model)
            items = dt.flatten(ddp, opt, sched)
            self.assertIn("model.0.weight", items)
            self.assertFalse(any(k.startswith("model.module.") for k in items))
            train(ddp, opt, sched, 1)
            dt.save(self.ctx, self.path("c"), model=ddp, optimizer=opt)
            m2, o2, _ = make(seed=3)
            dt.load(self.ctx, self.path("c"), model=m2, optimizer=o2)
            self.assertSameState(state_bytes(model, opt), state_bytes(m2, o2))
        finally:
            dist.destroy_process_group()

    def test_strictness_and_mismatches(self):
        model, opt, sched = make()
        dt.save(self.ctx, self.path("c"), model=model, optimizer=opt, rng=False)
        bigger = torch.nn.Sequential(*list(make()[0]), torch.nn.Linear(3, 2))
        with self.assertRaises(dcp.NotFoundError) as cm:
            dt.load(self.ctx, self.path("c"), model=bigger, rng=False)
        self.assertIn("model.5.weight", cm.exception.message)
        before = bigger[5].weight.detach().clone()
        dt.load(self.ctx, self.path("c"), model=bigger, rng=False, strict=False)
        self.assertTrue(torch.equal(bigger[5].weight, before))
        self.assertTrue(torch.equal(bigger[0].weight, model[0].weight))
        wrong = torch.nn.Sequential(torch.nn.Linear(6, 9))
        with self.assertRaises(dcp.MismatchError):
            dt.load(self.ctx, self.path("c"), model=wrong, rng=False, strict=False)
        m2, _, _ = make()
        sgd = torch.optim.SGD([m2[0].weight], lr=0.1)
        with self.assertRaises(dcp.MismatchError):
            dt.load(self.ctx, self.path("c"), model=m2, optimizer=sgd, rng=False)
        with self.assertRaises(dcp.NotFoundError):  # no rng saved
            dt.load(self.ctx, self.path("c"), model=m2)
        with self.assertRaises(TypeError):  # not tagged JSON, and never pickled
            dt.flatten(model, extra={"o": object()})

    def test_async_save_and_latest_checkpoint(self):
        model, opt, sched = make()
        root = self.path("run")
        os.mkdir(root)
        fut = dt.async_save(self.ctx, os.path.join(root, "step-3"), model=model, optimizer=opt,
                            scheduler=sched, extra={"step": 3})
        train(model, opt, sched, 1)  # staged: training may go on
        fut.wait()
        self.assertTrue(fut.persisted)
        os.mkdir(os.path.join(root, "step-9"))  # an uncommitted save
        os.mkdir(os.path.join(root, "other"))
        self.assertEqual(dt.latest_checkpoint(self.ctx, root), os.path.join(root, "step-3"))
        self.assertIsNone(dt.latest_checkpoint(self.ctx, self.path("none")))
        m2, o2, s2 = make(seed=9)
        self.assertEqual(dt.load(self.ctx, os.path.join(root, "step-3"), model=m2,
                                 optimizer=o2, scheduler=s2, rng=False), {"step": 3})
        self.assertEqual(s2.last_epoch, 0)


if __name__ == "__main__":
    torch.set_num_threads(1)
    unittest.main(verbosity=2)
