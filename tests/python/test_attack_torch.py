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

    def test_crafted_tags_are_corrupt_errors_naming_the_key(self):
        crafted = [{"__dcp__": "torch.dtype", "v": "load"},  # was torch.load itself
                   {"__dcp__": "torch.dtype", "v": "Tensor"},
                   {"__dcp__": "tensor", "dtype": "save", "shape": [1], "v": ""},
                   {"__dcp__": "tensor", "dtype": "float32", "shape": [4], "v": "AAAA"},
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

    def test_sparse_tensors_are_refused_naming_the_key(self):
        with self.assertRaises(dcp.InvalidError) as cm:
            self.save({"s": torch.eye(3).to_sparse()})
        self.assertIn("'s'", str(cm.exception))
        path = self.save({"s": torch.eye(3)})
        with self.assertRaises(dcp.InvalidError) as cm:
            dt.load({"s": torch.zeros(3, 3).to_sparse()}, checkpoint_id=path, ctx=self.ctx)
        self.assertIn("'s'", str(cm.exception))


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
        self.assertEqual(self.ranks(), (0, 1, 0))
        self.assertEqual(self.ranks(RANK=" 3", WORLD_SIZE="4 ", LOCAL_RANK="1",
                                    LOCAL_WORLD_SIZE="2"), (3, 4, 1))
        self.assertEqual(self.ranks(RANK="0", WORLD_SIZE="1", LOCAL_RANK=""), (0, 1, 0))


if __name__ == "__main__":
    unittest.main()
