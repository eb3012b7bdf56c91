"""Attacks on dcp.torch (one process): checkpoint values crafted to
smuggle code or garbage past tagged JSON, load destinations that cannot
hold the values (overlapping views, sparse, lazily conjugated), every
dtype cast against torch's own .to(), flattening collisions, strictness,
tied weights, async saves racing the trainer, optimizers and schedulers,
and dcp.Context.from_env() under inconsistent torchrun variables.
Run: python3 test_attack_torch.py."""

import base64
import gc
import json
import os
import pickle
import unittest
import warnings
from unittest import mock

import torch

import dcp
import dcp.torch as dt
from dcp import _env
from dcp_testkit import DcpCase

RAN = []  # what an unpickled Trap appends to


class Trap:
    """Unpickling it runs code: appends to RAN."""

    def __reduce__(self):
        return (RAN.append, ("unpickled",))


def pickled_item():
    return {"__dcp__": "pickle", "v": base64.b64encode(pickle.dumps(Trap())).decode()}


class Values(DcpCase):
    tmp_prefix = "dcp-attack-val-"

    def raw(self, name, value):
        """A checkpoint whose bytes item 'o' holds value (JSON-encoded) as is."""
        dcp.save(self.ctx, {"o": json.dumps(value).encode() if not isinstance(value, bytes)
                            else value}, self.path(name))
        return self.path(name)

    def test_a_pickled_value_is_never_unpickled_without_the_opt_in(self):
        dt.save({"o": Trap(), "x": torch.ones(2)}, checkpoint_id=self.path("p"), ctx=self.ctx,
                allow_pickle=True)
        RAN.clear()  # saving pickles, it does not unpickle
        for path in (self.path("p"), self.raw("crafted", pickled_item()),
                     self.raw("nested", {"a": [1, {"__dcp__": "tuple", "v": [pickled_item()]}]})):
            sd = {"o": None, "x": torch.zeros(2)} if path == self.path("p") else {"o": None}
            with self.assertRaises(dcp.InvalidError) as cm:
                dt.load(sd, checkpoint_id=path, ctx=self.ctx)
            self.assertIn("'o'", str(cm.exception))
            self.assertIn("allow_pickle", str(cm.exception))
            self.assertIsNone(sd["o"])
        self.assertEqual(RAN, [])
        # a user dict that looks like the tag, inside a tuple, stays a dict
        dt.save({"o": (pickled_item(),)}, checkpoint_id=self.path("u"), ctx=self.ctx)
        sd = {"o": None}
        dt.load(sd, checkpoint_id=self.path("u"), ctx=self.ctx)
        self.assertEqual(sd["o"], (pickled_item(),))
        self.assertEqual(RAN, [])
        dt.load(sd, checkpoint_id=self.path("u"), ctx=self.ctx, allow_pickle=True)
        self.assertEqual(RAN, [])

    def test_importing_torchs_checkpoint_needs_the_opt_in(self):
        tcp = dt._torch_dcp()
        src = self.path("torch")
        tcp.save_state_dict({"w": torch.ones(2)}, tcp.FileSystemWriter(src), no_dist=True)
        with open(os.path.join(src, ".metadata"), "wb") as f:  # torch reads it with pickle
            pickle.dump(Trap(), f)
        RAN.clear()
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.import_torch_dcp(src, self.path("lib"))  # tensors only: still unpickled
        self.assertIn("allow_pickle=True", str(cm.exception))
        self.assertEqual(RAN, [])
        self.assertFalse(dcp.committed(self.ctx, self.path("lib")))

    def test_crafted_tags_are_corrupt_errors_naming_the_key(self):
        crafted = [{"__dcp__": "torch.dtype", "v": "load"},  # was torch.load itself
                   {"__dcp__": "torch.dtype", "v": "Tensor"},
                   {"__dcp__": "tensor", "dtype": "save", "shape": [1], "v": ""},
                   {"__dcp__": "tensor", "dtype": "float32", "shape": [4], "v": "AAAA"},
                   {"__dcp__": "tensor", "dtype": "float32", "shape": [2 ** 40, 2 ** 20], "v": ""},
                   {"__dcp__": "tensor", "dtype": "float32", "shape": [-1], "v": ""},
                   {"__dcp__": "ndarray", "dtype": "|O", "shape": [1], "v": "00" * 8},
                   {"__dcp__": "ndarray", "dtype": "<f4", "shape": [9], "v": "00"},
                   {"__dcp__": "tuple"}, {"__dcp__": "dict", "v": [[[1], 2]]},
                   {"__dcp__": "complex", "v": "ab"}, {"__dcp__": "no such tag"},
                   b"\xff\xfe not UTF-8", b"{not json", b"[" * 100000]
        for i, value in enumerate(crafted):
            sd = {"o": "before"}
            with self.assertRaises(dcp.CorruptError, msg=repr(value)[:60]) as cm:
                dt.load(sd, checkpoint_id=self.raw("c%d" % i, value), ctx=self.ctx)
            self.assertIn("'o'", str(cm.exception))
            self.assertEqual(sd["o"], "before")
        # the real tags still decode
        sd = {"o": None}
        dt.save({"o": (torch.float16, torch.device("cpu"), torch.arange(3))},
                checkpoint_id=self.path("ok"), ctx=self.ctx)
        dt.load(sd, checkpoint_id=self.path("ok"), ctx=self.ctx)
        self.assertEqual(sd["o"][:2], (torch.float16, torch.device("cpu")))
        self.assertTrue(torch.equal(sd["o"][2], torch.arange(3)))

    def test_the_index_key_is_reserved(self):
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.save({"x": torch.ones(1)}, checkpoint_id=self.path("k"), ctx=self.ctx,
                    kv={"dcp.torch": "mine"})
        self.assertIn("'dcp.torch'", str(cm.exception))
        self.assertFalse(dcp.committed(self.ctx, self.path("k")))
        dt.save({"x": torch.ones(1)}, checkpoint_id=self.path("k"), ctx=self.ctx,
                kv={"mine": "1"})
        self.assertEqual(dcp.meta_open(self.ctx, self.path("k")).kv()["mine"], "1")

    def test_a_crafted_index_is_a_corrupt_error(self):
        for i, index in enumerate(['{"version": 1, "as_real": {"x": "load"}}', "[1]", "{",
                                   '{"as_real": []}']):
            st = dcp.State(self.ctx)
            st.add_tensor("x", dcp.F32, (2,))
            st.add_chunk("x", (0,), (2,), memoryview(bytearray(8)).cast("f"))
            dcp._dcp.save(self.ctx, st, self.path("i%d" % i), kv={"dcp.torch": index})
            del st
            with self.assertRaises(dcp.CorruptError) as cm:
                dt.load({"x": torch.zeros(2)}, checkpoint_id=self.path("i%d" % i), ctx=self.ctx)
            self.assertIn("dcp.torch", str(cm.exception))


class Views(DcpCase):
    tmp_prefix = "dcp-attack-view-"

    def save(self, sd, name="c"):
        dt.save(sd, checkpoint_id=self.path(name), ctx=self.ctx)
        return self.path(name)

    def test_overlapping_destinations_are_refused_before_anything_is_written(self):
        path = self.save({"a": torch.arange(4.).reshape(2, 2), "b": torch.arange(3.)})
        for bad in (torch.zeros(2).expand(2, 2), torch.zeros(3).as_strided((2, 2), (1, 1))):
            other = torch.full((3,), -1.0)
            with self.assertRaises(dcp.InvalidError) as cm:
                dt.load({"b": other, "a": bad}, checkpoint_id=path, ctx=self.ctx)
            self.assertIn("'a'", str(cm.exception))
            self.assertIn("overlap", str(cm.exception))
            self.assertTrue(torch.equal(other, torch.full((3,), -1.0)))  # nothing loaded
        # saving one is fine: its values are what it shows
        path = self.save({"e": torch.arange(2.).expand(3, 2)}, "e")
        got = torch.zeros(3, 2)
        dt.load({"e": got}, checkpoint_id=path, ctx=self.ctx)
        self.assertTrue(torch.equal(got, torch.arange(2.).expand(3, 2)))

    def test_views_as_destinations_write_through(self):
        want = torch.arange(24.).reshape(4, 6)
        path = self.save({"t": want.t(), "s": want[:, 1:5:2], "r": want[2:], "z": torch.zeros(0, 3),
                          "d": torch.tensor(7.0), "h": want.to(torch.bfloat16).t()})
        base, base2, base3 = torch.zeros(4, 6), torch.zeros(4, 6), torch.zeros(9, 6)
        hb = torch.zeros(4, 6, dtype=torch.bfloat16)
        z, d = torch.zeros(0, 3), torch.tensor(0.0)
        dt.load({"t": base.t(), "s": base2[:, 1:5:2], "r": base3[7:], "z": z, "d": d, "h": hb.t()},
                checkpoint_id=path, ctx=self.ctx)
        self.assertTrue(torch.equal(base, want))
        self.assertTrue(torch.equal(base2[:, 1:5:2], want[:, 1:5:2]))
        self.assertEqual(float(base2[:, 0].abs().sum()), 0.0)  # only the view's elements
        self.assertTrue(torch.equal(base3[7:], want[2:]))
        self.assertEqual(float(d), 7.0)
        self.assertTrue(torch.equal(hb, want.to(torch.bfloat16)))
        # layouts whose strides are not in order, without overlap: loaded into
        img = torch.arange(2 * 3 * 4 * 5.).reshape(2, 3, 4, 5)
        path = self.save({"img": img, "p": img.permute(3, 1, 0, 2)}, "layouts")
        cl = torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last)
        padded = torch.empty_strided((5, 3, 2, 4), (1, 200, 50, 10)).zero_()
        dt.load({"img": cl, "p": padded}, checkpoint_id=path, ctx=self.ctx)
        self.assertTrue(torch.equal(cl, img))
        self.assertTrue(torch.equal(padded, img.permute(3, 1, 0, 2)))

    def test_lazily_conjugated_and_negated_tensors(self):
        z = torch.tensor([1 + 2j, 3 - 4j])
        for dtype in (torch.complex64, torch.complex128):
            path = self.save({"c": z.to(dtype).conj(), "n": torch._neg_view(torch.arange(3.))},
                             str(dtype))
            c, n = torch.zeros(2, dtype=dtype), torch.zeros(3)
            dt.load({"c": c, "n": n}, checkpoint_id=path, ctx=self.ctx)
            self.assertTrue(torch.equal(c, z.to(dtype).conj().resolve_conj()))
            self.assertTrue(torch.equal(n, -torch.arange(3.)))
            # a conj() view as the destination reads back the saved values
            base = torch.zeros(2, dtype=dtype)
            dt.load({"c": base.conj()}, checkpoint_id=path, ctx=self.ctx, strict=False)
            self.assertTrue(torch.equal(base.conj().resolve_conj(), c))

    def test_a_load_is_an_in_place_change_for_autograd(self):
        lin = torch.nn.Linear(3, 3)
        path = self.save({"w": lin.weight.detach().clone() * 2})
        x = torch.randn(2, 3, requires_grad=True)
        loss = (lin(x) ** 2).sum()  # the graph saved lin.weight (for x.grad)
        dt.load({"w": lin.weight}, checkpoint_id=path, ctx=self.ctx)
        with self.assertRaises(RuntimeError) as cm:  # not a backward through stale values
            loss.backward()
        self.assertIn("inplace", str(cm.exception))

    def test_sparse_tensors_are_refused_naming_the_key(self):
        with self.assertRaises(dcp.InvalidError) as cm:
            self.save({"s": torch.eye(3).to_sparse()})
        self.assertIn("'s'", str(cm.exception))
        path = self.save({"s": torch.eye(3)})
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.load({"s": torch.zeros(3, 3).to_sparse()}, checkpoint_id=path, ctx=self.ctx)
        self.assertIn("'s'", str(cm.exception))


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]


class Holds(DcpCase):
    """Attacks that found nothing: kept so that they keep finding nothing."""
    tmp_prefix = "dcp-attack-holds-"

    def test_cast_between_every_dtype_pair_is_torchs_own_to(self):
        src = torch.tensor([0.0, 1.5, -2.25, 3.0, 100.7, -0.5, 255.0, 1e4])
        for a in DTYPES:
            x = (src + 1j * src.flip(0)).to(a) if a.is_complex else src.to(a)
            dt.save({"x": x}, checkpoint_id=self.path(str(a)), ctx=self.ctx)
            for b in DTYPES:
                y = torch.zeros(8, dtype=b)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # complex to real drops the imaginary part
                    dt.load({"x": y}, checkpoint_id=self.path(str(a)), ctx=self.ctx, cast=True)
                    want = x.to(b)
                self.assertTrue(torch.equal(y, want), "%s -> %s: %s, torch %s" % (a, b, y, want))
                if a != b:
                    with self.assertRaises(dcp.MismatchError) as cm:
                        dt.load({"x": y}, checkpoint_id=self.path(str(a)), ctx=self.ctx)
                    self.assertIn("cast=True", str(cm.exception))

    def test_keys_that_collide_after_flattening_are_refused(self):
        t = torch.ones(1)
        dt.save({"a": [torch.ones(1), torch.full((1,), 2.0)]}, checkpoint_id=self.path("l"),
                ctx=self.ctx)
        for sd in ({"a.b": t, "a": {"b": t}}, {"a": {"0": t}, "a.0": 3}, {"a": [t], "a.0": t},
                   {"a": {0: t, "0": t}}, {0: t, "0": 1}, {"m": torch.nn.Linear(1, 1),
                                                           "m.weight": t}):
            with self.assertRaises(dcp.InvalidError, msg=str(list(sd))) as cm:
                dt.save(sd, checkpoint_id=self.path("c"), ctx=self.ctx)
            self.assertIn("flatten to the key", str(cm.exception))
            with self.assertRaises(dcp.InvalidError):
                dt.load(sd, checkpoint_id=self.path("l"), ctx=self.ctx)
        self.assertFalse(dcp.committed(self.ctx, self.path("c")))
        # a list saved, a dict of digit keys loaded (torch DCP's rule): same keys
        dest = {"a": {"0": torch.zeros(1), "1": torch.zeros(1)}}
        dt.load(dest, checkpoint_id=self.path("l"), ctx=self.ctx)
        self.assertEqual([float(dest["a"][k]) for k in "01"], [1.0, 2.0])

    def test_a_refused_load_changes_nothing_and_kinds_must_match(self):
        dt.save({"a": torch.ones(2), "n": 3, "v": [1, 2]}, checkpoint_id=self.path("c"),
                ctx=self.ctx)
        for dest, error, text in (
                ({"a": torch.zeros(2), "v": None, "gone": torch.zeros(1)}, dcp.NotFoundError,
                 "'gone'"),
                ({"a": torch.zeros(2), "v": None, "n": torch.zeros(1)}, dcp.NotFoundError,
                 "'n'"),  # a tensor where a value was saved
                ({"a": torch.zeros(3), "v": None}, dcp.MismatchError, "[3]")):
            with self.assertRaises(error) as cm:
                dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx)
            self.assertIn(text, str(cm.exception))
            self.assertIsNone(dest["v"])  # nothing loaded
            self.assertEqual(float(dest["a"].sum()), 0.0)
        dest = {"a": 0}  # a value where a tensor was saved
        with self.assertRaises(dcp.NotFoundError):
            dt.load(dest, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertEqual(dest["a"], 0)

    def test_tied_and_overlapping_tensors(self):
        w = torch.arange(4.)
        dt.save({"a": w, "b": w, "c": w[1:3]}, checkpoint_id=self.path("c"), ctx=self.ctx)
        shapes = {t["fqn"]: t["shape"] for t in dcp.meta_open(self.ctx, self.path("c")).tensors()}
        self.assertEqual(shapes, {"a": (4,), "b": (4,), "c": (2,)})
        tied = torch.zeros(4)
        dt.load({"a": tied, "b": tied, "c": tied[1:3]}, checkpoint_id=self.path("c"),
                ctx=self.ctx)
        self.assertTrue(torch.equal(tied, w))

    def test_async_save_keeps_the_values_it_was_given(self):
        n = 1 << 20
        for background in (False, True):
            x = torch.arange(n, dtype=torch.float32)
            want = x.clone()
            fut = dt.async_save({"x": x, "t": x.view(1024, -1).t(), "h": x.to(torch.bfloat16)},
                                checkpoint_id=self.path("a%d" % background), ctx=self.ctx,
                                background_staging=background)
            if background:
                del x  # the handle keeps what it stages alive
                gc.collect()
                junk = [torch.full((n,), 7.0) for _ in range(3)]
                fut.fence()
                del junk
            else:
                x.add_(1)  # staged by the time async_save returned
            fut.result()
            self.assertTrue(fut.done())
            got = {"x": torch.zeros(n), "t": torch.zeros(n // 1024, 1024),
                   "h": torch.zeros(n, dtype=torch.bfloat16)}
            dt.load(got, checkpoint_id=self.path("a%d" % background), ctx=self.ctx)
            self.assertTrue(torch.equal(got["x"], want))
            self.assertTrue(torch.equal(got["t"], want.view(1024, -1).t()))
            self.assertTrue(torch.equal(got["h"], want.to(torch.bfloat16)))
        fut = dt.async_save({"x": torch.ones(3)}, checkpoint_id="/proc/no/such/dir", ctx=self.ctx)
        self.assertIsInstance(fut.exception(), dcp.Error)
        with self.assertRaises(dcp.Error):
            fut.result()
        closed = dcp.Context()
        closed.close()
        for call in (dt.save, dt.async_save, dt.load):
            with self.assertRaises(dcp.InvalidError):
                call({"x": torch.ones(1)}, checkpoint_id=self.path("a0"), ctx=closed)
        self.ctx.async_shutdown()

    def test_optimizer_groups_reordered_or_a_parameter_missing(self):
        def make(seed, groups):
            torch.manual_seed(seed)
            m = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(3)])
            return m, torch.optim.Adam([{"params": p, "lr": lr} for p, lr in groups(m)], lr=0.1)
        m, o = make(0, lambda m: [(m[0].parameters(), 0.1), (m[1].parameters(), 0.5)])
        m(torch.randn(2, 4)).sum().backward()
        o.step()
        msd, osd = dt.get_state_dict(m, o)
        dt.save({"model": msd, "optim": osd}, checkpoint_id=self.path("o"), ctx=self.ctx)
        for groups in (lambda m: [(m[1].parameters(), 0.5), (m[0].parameters(), 0.1)],
                       lambda m: [(m[0].parameters(), 0.1), ([m[1].weight], 0.5)],
                       lambda m: [(m[0].parameters(), 0.1), ([m[1].bias, m[1].weight], 0.5)]):
            m2, o2 = make(1, groups)
            msd2, osd2 = dt.get_state_dict(m2, o2)
            dt.load({"model": msd2, "optim": osd2}, checkpoint_id=self.path("o"), ctx=self.ctx)
            with self.assertRaises(dcp.MismatchError):
                dt.set_state_dict(m2, o2, model_state_dict=msd2, optim_state_dict=osd2)
        # the same groups: bit for bit
        m3, o3 = make(2, lambda m: [(m[0].parameters(), 0.1), (m[1].parameters(), 0.5)])
        msd3, osd3 = dt.get_state_dict(m3, o3)
        dt.load({"model": msd3, "optim": osd3}, checkpoint_id=self.path("o"), ctx=self.ctx)
        dt.set_state_dict(m3, o3, model_state_dict=msd3, optim_state_dict=osd3)
        for p, q in zip(m.parameters(), m3.parameters()):
            self.assertTrue(torch.equal(p, q))
            if p in o.state:
                self.assertTrue(torch.equal(o.state[p]["exp_avg_sq"], o3.state[q]["exp_avg_sq"]))

    def test_lr_schedulers_round_trip(self):
        def make():
            opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
            sch = torch.optim.lr_scheduler
            return opt, [sch.StepLR(opt, 3, gamma=0.5), sch.CosineAnnealingWarmRestarts(opt, 5),
                         sch.MultiStepLR(opt, [2, 4])]
        opt, scheds = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(7):
                opt.step()
                for s in scheds:
                    s.step()
        dt.save({"s%d" % i: s for i, s in enumerate(scheds)}, checkpoint_id=self.path("s"),
                ctx=self.ctx)
        _, fresh = make()
        dt.load({"s%d" % i: s for i, s in enumerate(fresh)}, checkpoint_id=self.path("s"),
                ctx=self.ctx)
        for a, b in zip(scheds, fresh):
            self.assertEqual(repr(a.state_dict()), repr(b.state_dict()))


class Staging(DcpCase):
    tmp_prefix = "dcp-attack-stage-"

    def test_a_load_into_tensors_being_staged_waits_for_the_staging(self):
        n = 1 << 22
        dt.save({"x": torch.full((n,), -5.0)}, checkpoint_id=self.path("other"), ctx=self.ctx)
        x = torch.arange(n, dtype=torch.float32)
        want = x.clone()
        fut = dt.async_save({"x": x}, checkpoint_id=self.path("c"), ctx=self.ctx,
                            background_staging=True)
        dt.load({"x": x}, checkpoint_id=self.path("other"), ctx=self.ctx)  # no fence first
        fut.result()
        got = torch.zeros(n)
        dt.load({"x": got}, checkpoint_id=self.path("c"), ctx=self.ctx)
        self.assertTrue(torch.equal(got, want))
        self.assertEqual(float(x[0]), -5.0)
        # a manager's async save on the context left in background staging
        x = torch.arange(n, dtype=torch.float32)
        with dcp.CheckpointManager(self.ctx, self.path("run"), quiet=True) as mgr:
            fut = dt.async_save({"x": x}, manager=mgr, step=1)
            self.assertTrue(fut.staging_completion.done())
            x.fill_(-1)  # staged, as staging_completion says
            fut.result()
            got = torch.zeros(n)
            dt.load({"x": got}, manager=mgr, step=1)
        self.assertTrue(torch.equal(got, want))
        dt._set_staging(self.ctx, False)
        self.ctx.async_shutdown()


class FromEnv(unittest.TestCase):
    def ranks(self, **env):
        clean = {k: v for k, v in os.environ.items()
                 if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
        clean.update(env)
        with mock.patch.dict(os.environ, clean, clear=True):
            return _env.ranks()

    def test_inconsistent_torchrun_variables_are_clear_errors(self):
        bad = [(dict(RANK="-1", WORLD_SIZE="2"), "RANK=-1"),
               (dict(RANK="2", WORLD_SIZE="2"), "RANK=2"),
               (dict(RANK="x", WORLD_SIZE="2"), "RANK='x'"),
               (dict(RANK="0", WORLD_SIZE="0"), "WORLD_SIZE=0"),
               (dict(RANK="0", WORLD_SIZE="-3"), "WORLD_SIZE=-3"),
               (dict(RANK="0", WORLD_SIZE=str(2 ** 70)), "WORLD_SIZE="),
               (dict(WORLD_SIZE="2"), "RANK is not set"),  # was rank 0 in every process
               (dict(RANK="1"), "RANK=1"),
               (dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="-1"), "LOCAL_RANK=-1"),
               (dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="abc"), "LOCAL_RANK='abc'"),
               (dict(RANK="1", WORLD_SIZE="4", LOCAL_RANK="2", LOCAL_WORLD_SIZE="2"),
                "LOCAL_RANK=2"),
               (dict(RANK="0", WORLD_SIZE="4", LOCAL_WORLD_SIZE="8"), "LOCAL_WORLD_SIZE=8")]
        for env, text in bad:
            with self.assertRaises(dcp.InvalidError, msg=str(env)) as cm:
                self.ranks(**env)
            self.assertIn(text, str(cm.exception))
            with mock.patch.dict(os.environ, env):
                with self.assertRaises(dcp.InvalidError):
                    dcp.Context.from_env()
        for master, port, text in (("nonexistent.invalid", "29555", "MASTER_ADDR"),
                                   ("192.0.2.1", "99999", "MASTER_PORT")):
            env = dict(RANK="0", WORLD_SIZE="2", MASTER_ADDR=master, MASTER_PORT=port)
            with mock.patch.dict(os.environ, env):
                with self.assertRaises(dcp.InvalidError, msg=str(env)) as cm:
                    dcp.Context.from_env(rendezvous="dir", rendezvous_dir="/nonexistent")
                self.assertIn(text, str(cm.exception))
        self.assertEqual(self.ranks(), (0, 1, 0))
        self.assertEqual(self.ranks(RANK=" 3", WORLD_SIZE="4 ", LOCAL_RANK="1",
                                    LOCAL_WORLD_SIZE="2"), (3, 4, 1))
        self.assertEqual(self.ranks(RANK="0", WORLD_SIZE="1", LOCAL_RANK=""), (0, 1, 0))


if __name__ == "__main__":
    unittest.main()
