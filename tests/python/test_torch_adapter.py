"""Single-process tests of dcp.pytorch: a training state (model, Adam,
StepLR, RNG states, extras) saved and loaded back bit for bit, in place;
bf16 and integer tensors; DDP unwrapping; strictness and mismatches;
latest_checkpoint skipping an uncommitted save; what a port of a real
trainer needed (issue 14): a dict of models, a list of optimizers and of
schedulers (OneCycleLR, CyclicLR), get_extra_state, tensors in extras,
non-contiguous and complex128 tensors, an fp32 checkpoint loaded into a
bf16 model with cast=True, a Hugging Face import loaded with
model_prefix="". Run: python3 this file."""

import os
import random
import unittest

import numpy as np
import torch

import dcp
import dcp.pytorch as dt
from dcp_testkit import DcpCase


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


class Adapter(DcpCase):
    tmp_prefix = "dcp-torch-"

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

    def test_what_a_ported_trainer_needs(self):
        class Extra(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(3, 3)
                self.info = {"seen": 0}

            def get_extra_state(self):
                return self.info

            def set_extra_state(self, st):
                self.info = st

            def forward(self, x):
                return self.lin(x)

        def build(seed):
            torch.manual_seed(seed)
            models = {"gen": torch.nn.Linear(4, 3), "disc": Extra()}
            opts = [torch.optim.Adam(models["gen"].parameters(), lr=0.01),
                    torch.optim.SGD(models["disc"].parameters(), lr=0.1, momentum=0.9)]
            scheds = [torch.optim.lr_scheduler.OneCycleLR(opts[0], max_lr=0.05, total_steps=10),
                      torch.optim.lr_scheduler.CyclicLR(opts[1], 0.01, 0.1, step_size_up=2)]
            return models, opts, scheds

        models, opts, scheds = build(0)
        for step in range(3):
            loss = models["disc"](models["gen"](torch.randn(2, 4))).sum()
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o, sc in zip(opts, scheds):
                o.step()
                sc.step()
            models["disc"].info["seen"] += 1
        extra = {"step": 3, "ema": torch.arange(4.0), "pair": (torch.ones(2), 1)}
        dt.save(self.ctx, self.path("c"), model=models, optimizer=opts, scheduler=scheds,
                extra=extra, rng=False)
        m2, o2, s2 = build(7)
        got = dt.load(self.ctx, self.path("c"), model=m2, optimizer=o2, scheduler=s2, rng=False)
        self.assertTrue(torch.equal(got["ema"], extra["ema"]))
        self.assertTrue(torch.equal(got["pair"][0], torch.ones(2)))
        self.assertEqual(m2["disc"].info, {"seen": 3})
        for k in models:
            for a, b in zip(models[k].state_dict().values(), m2[k].state_dict().values()):
                if torch.is_tensor(a):
                    self.assertTrue(torch.equal(a, b), k)
        for a, b in zip(opts, o2):
            self.assertSameState(state_bytes(torch.nn.Module(), a), state_bytes(torch.nn.Module(), b))
            self.assertEqual(a.param_groups[0]["lr"], b.param_groups[0]["lr"])
        self.assertEqual(s2[0].last_epoch, 3)
        self.assertIs(s2[0].anneal_func.__self__, s2[0])  # its own function, by name
        self.assertIs(s2[1]._scale_fn_ref().__self__, s2[1])

        # non-contiguous and complex128 tensors, both ways
        class Odd(torch.nn.Module):
            def __init__(self, w, c):
                super().__init__()
                self.register_buffer("w", w)
                self.register_buffer("c", c)

        w = torch.arange(12.0).reshape(3, 4).t()
        c = torch.arange(6, dtype=torch.float64).to(torch.complex128) * (1 + 2j)
        dt.save(self.ctx, self.path("odd"), model=Odd(w, c), rng=False)
        odd = Odd(torch.zeros(3, 4).t(), torch.zeros(6, dtype=torch.complex128))
        dt.load(self.ctx, self.path("odd"), model=odd, rng=False)
        self.assertTrue(torch.equal(odd.w, w))
        self.assertFalse(odd.w.is_contiguous())  # filled through a copy, not replaced
        self.assertTrue(torch.equal(odd.c, c))

        # an fp32 checkpoint into a bf16 model
        fp32 = torch.nn.Linear(4, 3)
        dt.save(self.ctx, self.path("fp32"), model=fp32, rng=False)
        bf16 = torch.nn.Linear(4, 3).to(torch.bfloat16)
        with self.assertRaises(dcp.MismatchError) as cm:
            dt.load(self.ctx, self.path("fp32"), model=bf16, rng=False)
        self.assertIn("cast=True", str(cm.exception))
        dt.load(self.ctx, self.path("fp32"), model=bf16, rng=False, cast=True)
        self.assertTrue(torch.equal(bf16.weight, fp32.weight.detach().to(torch.bfloat16)))

        # a Hugging Face safetensors import: its names are the model's fqns
        hf = torch.nn.Sequential(torch.nn.Linear(4, 3))
        dcp.save(self.ctx, {k: v.detach().numpy() for k, v in hf.state_dict().items()},
                 self.path("hf"))
        mine = torch.nn.Sequential(torch.nn.Linear(4, 3))
        dt.load(self.ctx, self.path("hf"), model=mine, rng=False, model_prefix="")
        self.assertTrue(torch.equal(mine[0].weight, hf[0].weight))
        mine2 = torch.nn.Sequential(torch.nn.Linear(4, 3))
        dt.load(self.path("hf"), model=mine2, rng=False, model_prefix="")  # default context
        self.assertTrue(torch.equal(mine2[0].weight, hf[0].weight))
        with self.assertRaises(dcp.InvalidError):
            dt.load("a", "b", model=mine2)

    def test_cuda_model_round_trip(self):
        if not torch.cuda.is_available():
            self.skipTest("no CUDA device: the adapter's CUDA staging runs only where CUDA is "
                          "available")
        model = torch.nn.Linear(8, 4).cuda()
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        model(torch.randn(2, 8, device="cuda")).sum().backward()
        opt.step()
        dt.save(self.ctx, self.path("gpu"), model=model, optimizer=opt, rng=False)
        m2 = torch.nn.Linear(8, 4).cuda()
        o2 = torch.optim.Adam(m2.parameters(), lr=0.1)
        dt.load(self.ctx, self.path("gpu"), model=m2, optimizer=o2, rng=False)
        self.assertEqual(m2.weight.device.type, "cuda")
        self.assertTrue(torch.equal(m2.weight, model.weight))
        self.assertTrue(torch.equal(o2.state[m2.weight]["exp_avg"], opt.state[model.weight]["exp_avg"]))

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
        # without a context: the process's dcp.Context.from_env() (rank 0 of 1 here)
        self.assertEqual(dt.latest_checkpoint(root), os.path.join(root, "step-3"))
        self.assertIsNone(dt.latest_checkpoint(self.ctx, self.path("none")))
        m2, o2, s2 = make(seed=9)
        self.assertEqual(dt.load(self.ctx, os.path.join(root, "step-3"), model=m2,
                                 optimizer=o2, scheduler=s2, rng=False), {"step": 3})
        self.assertEqual(s2.last_epoch, 0)


if __name__ == "__main__":
    torch.set_num_threads(1)
    unittest.main(verbosity=2)
