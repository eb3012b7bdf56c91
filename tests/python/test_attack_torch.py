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


if __name__ == "__main__":
    unittest.main()
