"""Attacks on dcp.pytorch (whole training states): model tensors that are
lazily conjugated, sparse, or overlapping load destinations, and saved
values (extra state, schedulers, extras, RNG) crafted to be something
other than tagged JSON. Run: python3 test_attack_pytorch.py."""

import json
import unittest

import numpy as np
import torch

import dcp
import dcp.pytorch as dp
from dcp_testkit import DcpCase


def model(**buffers):
    torch.manual_seed(0)
    m = torch.nn.Linear(2, 2)
    for k, v in buffers.items():
        m.register_buffer(k, v)
    return m


class Adapter(DcpCase):
    tmp_prefix = "dcp-attack-pt-"

    def test_conjugated_views_are_saved_and_loaded_with_their_values(self):
        z = torch.tensor([1 + 2j, 3 - 4j])
        dp.save(self.ctx, self.path("c"), model=model(z=z.conj(), n=torch._neg_view(
            torch.arange(3.))), rng=False)
        dest = model(z=torch.zeros(2, dtype=torch.complex64).conj(), n=torch.zeros(3))
        dp.load(self.ctx, self.path("c"), model=dest, rng=False)
        self.assertTrue(torch.equal(dest.z.resolve_conj(), z.conj().resolve_conj()))
        self.assertTrue(torch.equal(dest.n, -torch.arange(3.)))

    def test_a_load_is_an_in_place_change_for_autograd(self):
        m = model()
        dp.save(self.ctx, self.path("c"), model=m, rng=False)
        loss = (m(torch.randn(2, 2, requires_grad=True)) ** 2).sum()  # saves m.weight
        dp.load(self.ctx, self.path("c"), model=m, rng=False)  # written in place
        with self.assertRaises(RuntimeError) as cm:
            loss.backward()
        self.assertIn("inplace", str(cm.exception))

    def test_sparse_and_overlapping_tensors_are_refused_naming_them(self):
        with self.assertRaises(dcp.InvalidError) as cm:
            dp.save(self.ctx, self.path("s"), model=model(s=torch.eye(2).to_sparse()), rng=False)
        self.assertIn("'model.s'", str(cm.exception))
        dp.save(self.ctx, self.path("c"), model=model(e=torch.arange(2.)), rng=False)
        for bad in (torch.zeros(1).expand(2), torch.zeros(3).as_strided((2,), (0,))):
            dest = model(e=bad)
            with torch.no_grad():
                dest.weight.zero_()
            with self.assertRaises(dcp.InvalidError) as cm:
                dp.load(self.ctx, self.path("c"), model=dest, rng=False)
            self.assertIn("'model.e'", str(cm.exception))
            self.assertEqual(float(dest.weight.abs().sum()), 0.0)  # nothing loaded

    def test_crafted_values_are_corrupt_errors_naming_the_item(self):
        opt = torch.optim.SGD(model().parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, 2)
        for key in ("sched", "extra", "rng.python"):
            m = model()
            items = dp.flatten(m, opt, sched, rng=True, extra={"k": 1})
            items[key] = dcp.Bytes(json.dumps({"__dcp__": "torch.dtype", "v": "load"}).encode(),
                                   items[key].scope)
            dcp.save(self.ctx, items, self.path(key))
            with self.assertRaises(dcp.CorruptError) as cm:
                dp.load(self.ctx, self.path(key), model=m, optimizer=opt, scheduler=sched)
            self.assertIn("'%s'" % key, str(cm.exception))
        st = dcp.State(self.ctx)
        st.add_tensor("model.weight", dcp.F32, (2, 2))
        st.add_chunk("model.weight", (0, 0), (2, 2), np.zeros((2, 2), np.float32))
        dcp._dcp.save(self.ctx, st, self.path("k"), kv={"dcp.pytorch.complex128": "{bad"})
        del st
        with self.assertRaises(dcp.CorruptError):
            dp.load(self.ctx, self.path("k"), model=torch.nn.Linear(2, 2, bias=False), rng=False)


if __name__ == "__main__":
    unittest.main()
