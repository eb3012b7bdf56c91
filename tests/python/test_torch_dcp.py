"""Single-process tests of dcp.torch, the torch.distributed.checkpoint API
over libdcp: torch DCP's flattening rules; Stateful models, optimizers and
schedulers (several of each, OneCycleLR and CyclicLR, get_extra_state)
saved and loaded bit for bit into fresh objects; get_state_dict /
set_state_dict with optimizer state keyed by fqn; every dtype; non-
contiguous tensors both ways; cast=True; tagged JSON values and the
pickle opt-in on both sides; strictness; async_save's two completions;
a safetensors import loaded with key_prefix / key_map; steps through a
dcp.CheckpointManager (manager=, step=); interop with the
installed torch's own distributed checkpoint; the refusal of a plain
Context() under WORLD_SIZE>1; CUDA staging (skipped without a GPU).
Run: python3 this file."""

import os
import struct
import json
import unittest

import torch

import dcp
import dcp.torch as dt
from dcp_testkit import DcpCase


class Opaque:
    """A value tagged JSON cannot hold (pickle only)."""

    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, Opaque) and other.x == self.x


class WithExtra(torch.nn.Module):
    """A module with get_extra_state (a non-tensor in its state_dict)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.note = {"calls": 0, "tag": ("a", 1)}

    def get_extra_state(self):
        return self.note

    def set_extra_state(self, state):
        self.note = state

    def forward(self, x):
        return self.lin(x)


class Counter:
    """A user Stateful object."""

    def __init__(self):
        self.n = 0
        self.history = []

    def state_dict(self):
        return {"n": self.n, "history": list(self.history)}

    def load_state_dict(self, sd):
        self.n, self.history = sd["n"], list(sd["history"])


def models(seed):
    torch.manual_seed(seed)
    gen = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 4))
    disc = WithExtra()
    opt_g = torch.optim.Adam(gen.parameters(), lr=0.01)
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.1, momentum=0.9)
    sched_g = torch.optim.lr_scheduler.OneCycleLR(opt_g, max_lr=0.05, total_steps=20)
    sched_d = torch.optim.lr_scheduler.CyclicLR(opt_d, base_lr=0.01, max_lr=0.1, step_size_up=3)
    return gen, disc, opt_g, opt_d, sched_g, sched_d


def train(objs, steps, base=0):
    gen, disc, opt_g, opt_d, sched_g, sched_d = objs
    for s in range(steps):
        g = torch.Generator().manual_seed(base + s)
        x = torch.randn(5, 4, generator=g)
        loss = disc(gen(x)[:, :3]).square().mean()
        opt_g.zero_grad()
        opt_d.zero_grad()
        loss.backward()
        opt_g.step()
        opt_d.step()
        sched_g.step()
        sched_d.step()
        disc.note["calls"] += 1


def snapshot(*stateful):
    out = []
    for o in stateful:
        out.append(dt.flatten_state_dict({"x": o.state_dict()}))
    return out


class TorchDCP(DcpCase):
    tmp_prefix = "dcp-tdcp-"

    def assertSame(self, a, b, where=""):
        if torch.is_tensor(a):
            self.assertTrue(torch.is_tensor(b), where)
            if a.dtype in dt._AS_REAL:  # no equal() for complex32: compare the real views
                a, b = torch.view_as_real(a), torch.view_as_real(b)
            self.assertEqual(a.dtype, b.dtype, where)
            self.assertEqual(a.shape, b.shape, where)
            self.assertTrue(torch.equal(a, b), where)
        elif isinstance(a, dict):
            self.assertEqual(sorted(map(str, a)), sorted(map(str, b)), where)
            for k in a:
                self.assertSame(a[k], b[k], "%s.%s" % (where, k))
        elif isinstance(a, (list, tuple)):
            self.assertEqual(len(a), len(b), where)
            for i, (x, y) in enumerate(zip(a, b)):
                self.assertSame(x, y, "%s.%d" % (where, i))
        elif callable(a):
            self.assertEqual(getattr(a, "__qualname__", None), getattr(b, "__qualname__", None))
        else:
            self.assertEqual(a, b, where)

    def test_flattening_follows_torch_dcp(self):
        t = torch.zeros(1)
        sd = {"a": {"b": t, "c": [t, t], "d": [1, 2], "e": [{"x": t}], "f": (t,), "g": {},
                    3: t}, "n": 5, "m": [[1], [t]]}
        self.assertEqual(list(dt.flatten_state_dict(sd)),
                         ["a.b", "a.c.0", "a.c.1", "a.d", "a.e.0.x", "a.f", "a.3", "n",
                          "m.0", "m.1.0"])
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.save({"a.b": 1, "a": {"b": 2}}, checkpoint_id=self.path("dup"), ctx=self.ctx)
        self.assertIn("'a.b'", str(cm.exception))

    def test_stateful_models_optimizers_schedulers(self):
        objs = models(0)
        train(objs, 4)
        counter = Counter()
        counter.n, counter.history = 4, [0.5, 0.25]
        gen, disc, opt_g, opt_d, sched_g, sched_d = objs
        sd = {"models": {"gen": gen, "disc": disc}, "opt_g": opt_g, "opt_d": opt_d,
              "sched_g": sched_g, "sched_d": sched_d, "counter": counter, "step": 4}
        # nested Stateful objects are state_dicts by the time they are flattened
        sd["models"] = {k: m.state_dict() for k, m in sd["models"].items()}
        want = snapshot(gen, disc, opt_g, opt_d, sched_g, sched_d, counter)
        dt.save(sd, checkpoint_id=self.path("c"), ctx=self.ctx)

        fresh = models(9)  # other weights, optimizers without state
        g2, d2, og2, od2, sg2, sd2 = fresh
        c2 = Counter()
        dest = {"models": {"gen": g2.state_dict(), "disc": d2.state_dict()}, "opt_g": og2,
                "opt_d": od2, "sched_g": sg2, "sched_d": sd2, "counter": c2, "step": 0}
        dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx)
        g2.load_state_dict(dest["models"]["gen"])
        d2.load_state_dict(dest["models"]["disc"])
        self.assertEqual(dest["step"], 4)
        self.assertEqual(d2.note, {"calls": 4, "tag": ("a", 1)})  # get/set_extra_state
        got = snapshot(g2, d2, og2, od2, sg2, sd2, c2)
        self.assertSame(want, got)
        # the schedulers keep their own functions (saved by name only)
        self.assertEqual(sg2.anneal_func.__self__, sg2)
        self.assertIs(sd2._scale_fn_ref().__self__, sd2)
        # and training goes on identically
        train(objs, 2, base=100)
        train(fresh, 2, base=100)
        self.assertSame(snapshot(gen, disc, opt_g, opt_d), snapshot(g2, d2, og2, od2))

    def test_get_set_state_dict_by_fqn(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
        opts = [torch.optim.Adam(model[0].parameters(), lr=0.1),
                torch.optim.SGD(model[1].parameters(), lr=0.1, momentum=0.5)]
        model(torch.randn(2, 3)).sum().backward()
        for o in opts:
            o.step()
        msd, osd = dt.get_state_dict(model, opts)
        self.assertEqual(sorted(osd["state"]), ["0.bias", "0.weight", "1.bias", "1.weight"])
        self.assertEqual([g["params"] for g in osd["param_groups"]],
                         [["0.weight", "0.bias"], ["1.weight", "1.bias"]])
        dt.save({"model": msd, "optim": osd}, checkpoint_id=self.path("c"), ctx=self.ctx)
        keys = {t["fqn"] for t in dcp.meta_open(self.ctx, self.path("c")).tensors()}
        self.assertIn("optim.state.0.weight.exp_avg", keys)
        self.assertIn("optim.state.1.weight.momentum_buffer", keys)

        torch.manual_seed(5)
        m2 = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
        o2 = [torch.optim.Adam(m2[0].parameters(), lr=0.7),
              torch.optim.SGD(m2[1].parameters(), lr=0.7, momentum=0.5)]
        msd2, osd2 = dt.get_state_dict(m2, o2)  # creates the empty optimizers' state
        before = {k: v.clone() for k, v in msd2.items()}
        dt.load({"model": msd2, "optim": osd2}, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertFalse(all(torch.equal(before[k], msd2[k]) for k in before))
        dt.set_state_dict(m2, o2, model_state_dict=msd2, optim_state_dict=osd2)
        self.assertSame(model.state_dict(), m2.state_dict())
        for a, b in zip(opts, o2):
            self.assertSame(a.state_dict(), b.state_dict())
        # an optimizer whose state cannot be made by a zero step: a clear refusal,
        # the parameters and gradients as they were
        lb = torch.optim.LBFGS(m2.parameters())
        w = m2[0].weight.detach().clone()
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.get_optimizer_state_dict(m2, lb)
        self.assertIn("LBFGS", str(cm.exception))
        self.assertTrue(torch.equal(m2[0].weight, w))
        self.assertIsNone(m2[0].weight.grad)

    def test_every_dtype(self):
        g = torch.Generator().manual_seed(3)
        sd = {}
        dtypes = list(dt._TO_DCP) + list(dt._AS_REAL)
        for dtype in dtypes:
            base = torch.randn(3, 5, generator=g, dtype=torch.float64) * 50
            if dtype.is_complex:
                t = torch.complex(base, base.flip(0)).to(dtype)
            elif dtype == torch.bool:
                t = base > 0
            else:
                t = base.to(dtype)
            sd[str(dtype)] = t
        sd["scalar"] = torch.tensor(2.5, dtype=torch.float64)
        sd["empty"] = torch.zeros(0, 4, dtype=torch.int32)
        dt.save(sd, checkpoint_id=self.path("c"), ctx=self.ctx)
        dest = {k: torch.zeros_like(v) for k, v in sd.items()}
        dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertSame(sd, dest)
        self.assertIn("torch.complex128", sd)

    def test_non_contiguous_both_ways(self):
        base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
        sd = {"t": base.t(), "s": base[:, ::2], "c": torch.arange(6.).to(torch.complex128)[::2]}
        dt.save(sd, checkpoint_id=self.path("c"), ctx=self.ctx)
        big = torch.full((6, 8), -1.0)
        dest = {"t": big[:, :4], "s": torch.zeros(3, 4).t(),
                "c": torch.zeros(6, dtype=torch.complex128)[1::2]}
        dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertTrue(torch.equal(big[:, :4], base.t()))
        self.assertTrue((big[:, 4:] == -1).all())  # only the view was written
        self.assertTrue(torch.equal(dest["s"], base[:, ::2]))
        self.assertTrue(torch.equal(dest["c"], sd["c"]))

    def test_cast_on_load(self):
        w = torch.randn(4, 4, dtype=torch.float32)
        dt.save({"w": w}, checkpoint_id=self.path("c"), ctx=self.ctx)
        dest = {"w": torch.zeros(4, 4, dtype=torch.bfloat16)}
        with self.assertRaises(dcp.MismatchError) as cm:
            dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertIn("'w'", str(cm.exception))
        self.assertIn("cast=True", str(cm.exception))
        dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx, cast=True)
        self.assertTrue(torch.equal(dest["w"], w.to(torch.bfloat16)))
        wrong = {"w": torch.zeros(4, 5)}
        with self.assertRaises(dcp.MismatchError) as cm:
            dt.load(wrong, checkpoint_id=self.path("c"), ctx=self.ctx, cast=True)
        self.assertIn("shape", str(cm.exception))

    def test_values_json_and_pickle_opt_in(self):
        sd = {"extra": {"lr": [0.1, float("inf")], "pair": (1, "x"), "t": (torch.ones(2), 3),
                        "dtype": torch.bfloat16, "z": 1 + 2j, "none": None},
              "opaque": Opaque(7)}
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.save(sd, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertIn("'opaque'", str(cm.exception))
        self.assertIn("allow_pickle=True", str(cm.exception))
        self.assertFalse(os.path.exists(self.path("c")))
        dt.save(sd, checkpoint_id=self.path("c"), ctx=self.ctx, allow_pickle=True)
        dest = {"extra": {k: None for k in sd["extra"]}, "opaque": None}
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertIn("'opaque'", str(cm.exception))
        self.assertIn("allow_pickle=True", str(cm.exception))
        dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx, allow_pickle=True)
        self.assertSame(sd, dest)
        # the JSON values need no opt-in
        only_json = {"extra": {k: None for k in sd["extra"]}}
        dt.load(only_json, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertSame(sd["extra"], only_json["extra"])

    def test_strictness_and_argument_errors(self):
        dt.save({"a": torch.ones(2), "n": 1}, checkpoint_id=self.path("c"), ctx=self.ctx)
        dest = {"a": torch.zeros(2), "b": torch.zeros(2), "m": 0}
        with self.assertRaises(dcp.NotFoundError) as cm:
            dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertIn("'b'", str(cm.exception))
        dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx, strict=False)
        self.assertTrue(torch.equal(dest["a"], torch.ones(2)))
        self.assertEqual(dest["m"], 0)
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.save({"a": torch.ones(1)}, ctx=self.ctx)
        self.assertIn("checkpoint_id=", str(cm.exception))
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.save({"a": torch.ones(1)}, checkpoint_id=self.path("d"), ctx=self.ctx,
                    storage_writer=object())
        self.assertIn("storage_writer=", str(cm.exception))
        with self.assertRaises(dcp.ExistsError) as cm:
            dt.save({"a": torch.ones(1)}, checkpoint_id=self.path("c"), ctx=self.ctx,
                    overwrite=False)
        self.assertIn("overwrite=True", str(cm.exception))  # the Python argument
        self.assertNotIn("DCP_", str(cm.exception))

    def test_async_save_completions(self):
        t = torch.arange(6, dtype=torch.float32)
        fut = dt.async_save({"t": t, "step": 1}, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertTrue(fut.staging_completion.done())
        t.add_(100)  # staged: the save has its own copy
        self.assertIsNone(fut.result(timeout=120))
        self.assertTrue(fut.done())
        self.assertIsNone(fut.exception())
        dest = {"t": torch.zeros(6), "step": 0}
        dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertTrue(torch.equal(dest["t"], torch.arange(6, dtype=torch.float32)))
        self.assertEqual(dest["step"], 1)
        if not hasattr(self.ctx, "set_async_staging"):
            return
        # background staging: the tensors may change only after the fence
        big = torch.arange(1 << 16, dtype=torch.float64)
        fut = dt.async_save({"big": big}, checkpoint_id=self.path("bg"), ctx=self.ctx,
                            background_staging=True)
        self.assertIsNone(fut.staging_completion.result())
        self.assertTrue(fut.staging_completion.done())
        big.zero_()
        fut.result()
        # and back to blocking staging on the same context
        t2 = torch.ones(3)
        fut = dt.async_save({"t2": t2}, checkpoint_id=self.path("bl"), ctx=self.ctx)
        self.assertTrue(fut.staging_completion.done())
        t2.zero_()
        fut.result()
        dest = {"big": torch.zeros(1 << 16, dtype=torch.float64)}
        dt.load(dest, checkpoint_id=self.path("bg"), ctx=self.ctx)
        self.assertTrue(torch.equal(dest["big"], torch.arange(1 << 16, dtype=torch.float64)))
        dest = {"t2": torch.zeros(3)}
        dt.load(dest, checkpoint_id=self.path("bl"), ctx=self.ctx)
        self.assertTrue(torch.equal(dest["t2"], torch.ones(3)))

    def test_with_a_checkpoint_manager(self):
        if not hasattr(dcp, "CheckpointManager"):
            self.skipTest("dcp.CheckpointManager is not in this build")
        t = torch.zeros(4)
        with dcp.CheckpointManager(self.ctx, self.path("run"), keep_last=2, quiet=True) as mgr:
            self.assertIsNone(dt.load({"t": t}, manager=mgr))  # nothing to resume
            for step in (1, 2):
                t.fill_(step)
                dt.save({"t": t, "step": step}, manager=mgr, step=step)
            t.fill_(3)
            fut = dt.async_save({"t": t, "step": 3}, manager=mgr, step=3)
            t.fill_(-1)  # staged
            fut.result()
            self.assertTrue(fut.done())
            self.assertEqual([s.step for s in mgr.steps() if s.state == "committed"], [2, 3])
            dest = {"t": torch.zeros(4), "step": 0}
            self.assertEqual(dt.load(dest, manager=mgr), 3)
            self.assertTrue(torch.equal(dest["t"], torch.full((4,), 3.0)))
            self.assertEqual(dest["step"], 3)
            self.assertEqual(dt.load(dest, manager=mgr, step=2), 2)
            self.assertEqual(dest["step"], 2)
            with self.assertRaises(dcp.InvalidError):
                dt.save({"t": t}, manager=mgr)  # no step=

    def write_safetensors(self, path, tensors):
        header, blobs, off = {}, [], 0
        for name, t in tensors.items():
            raw = t.contiguous().numpy().tobytes()
            header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
            blobs.append(raw)
            off += len(raw)
        h = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

    def test_safetensors_import_with_key_prefix(self):
        torch.manual_seed(1)
        hf = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
        src = self.path("model.safetensors")
        self.write_safetensors(src, {"model." + k: v for k, v in hf.state_dict().items()})
        dcp.import_safetensors(self.ctx, src, self.path("imp"))
        mine = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
        with self.assertRaises(dcp.NotFoundError) as cm:
            dt.load(mine.state_dict(), checkpoint_id=self.path("imp"), ctx=self.ctx)
        self.assertIn("'0.weight'", str(cm.exception))
        dt.load(mine.state_dict(), checkpoint_id=self.path("imp"), ctx=self.ctx,
                key_prefix="model.")
        self.assertSame(hf.state_dict(), mine.state_dict())
        other = torch.nn.Linear(3, 4)
        dt.load(other.state_dict(), checkpoint_id=self.path("imp"), ctx=self.ctx,
                key_map={"weight": "model.0.weight", "bias": "model.0.bias"})
        self.assertSame(hf[0].state_dict(), other.state_dict())

    def test_interop_with_torch_dcp(self):
        tcp = dt._torch_dcp()
        sd = {"w": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int64), "meta": {"k": 1}}
        tdir = self.path("torch")
        tcp.save_state_dict(sd, tcp.FileSystemWriter(tdir), no_dist=True)
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.import_torch_dcp(tdir, self.path("lib"))  # torch's reader unpickles
        self.assertIn("allow_pickle=True", str(cm.exception))
        dt.import_torch_dcp(tdir, self.path("lib"), allow_pickle=True)
        # torch 1.13 pickled the dict whole; the import flattens it as torch
        # DCP's flatten_state_dict does
        dest = {"w": torch.zeros(3, 4), "b": torch.zeros(5, dtype=torch.int64),
                "meta": {"k": None}}
        dt.load(dest, checkpoint_id=self.path("lib"), ctx=self.ctx)  # stored as JSON
        self.assertSame(sd, dest)
        # and back: a libdcp checkpoint read by torch's own loader
        mine = {"x": torch.randn(2, 2, dtype=torch.float64), "c": torch.ones(2, dtype=torch.complex128),
                "step": 7}
        dt.save(mine, checkpoint_id=self.path("lib2"), ctx=self.ctx)
        dt.export_torch_dcp(self.path("lib2"), self.path("torch2"))
        back = {"x": torch.zeros(2, 2, dtype=torch.float64), "c": torch.zeros(2, dtype=torch.complex128),
                "step": 0}
        tcp.load_state_dict(back, tcp.FileSystemReader(self.path("torch2")), no_dist=True)
        self.assertSame(mine, back)

    def test_plain_context_refused_under_world_size(self):
        old = os.environ.get("WORLD_SIZE")
        os.environ["WORLD_SIZE"] = "4"
        try:
            with self.assertRaises(dcp.InvalidError) as cm:
                dcp.Context()
            self.assertIn("WORLD_SIZE=4", str(cm.exception))
            self.assertIn("from_env", str(cm.exception))
            dcp.Context(world_size=1).close()  # explicit: allowed
        finally:
            if old is None:
                del os.environ["WORLD_SIZE"]
            else:
                os.environ["WORLD_SIZE"] = old
        with dcp.Context.from_env() as ctx:  # no variables: rank 0 of 1
            self.assertEqual((ctx.rank, ctx.world_size), (0, 1))

    def test_cuda_tensors_staged_and_loaded_to_device(self):
        if not torch.cuda.is_available():
            self.skipTest("no CUDA device: the CUDA staging path (pinned host copy on a side "
                          "stream, load back to the device) runs only where CUDA is available")
        t = torch.randn(64, 32, device="cuda")
        fut = dt.async_save({"t": t}, checkpoint_id=self.path("c"), ctx=self.ctx)
        saved = t.cpu()
        t.zero_()
        fut.result()
        dest = {"t": torch.empty(64, 32, device="cuda")}
        dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertEqual(dest["t"].device.type, "cuda")
        self.assertTrue(torch.equal(dest["t"].cpu(), saved))


if __name__ == "__main__":
    torch.set_num_threads(1)
    unittest.main(verbosity=2)
