"""A tensor-parallel run saved 4-way is resumed 2-way: every loaded shard
(weights and Adam state) must equal the matching part of what the 4 ranks
saved, exactly; and the 2-way job's next step computes the same loss as the
4-way job's (up to float reassociation in the all-reduce).

Run: python3 test_tp_reshard.py (PYTHONPATH must reach the dcp package)."""

import os
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launch  # noqa: E402

TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tp_trainer.py")


def run(mode, world, root, ckpt):
    work, out = os.path.join(root, mode), os.path.join(root, mode + ".out")
    os.makedirs(out)
    job = launch.Job(TRAINER, world, [mode, "--work", work, "--ckpt", ckpt, "--out", out], work)
    job.start().wait(240)
    return [torch.load(os.path.join(out, "rank%d.pt" % r)) for r in range(world)]


def slices(offset, shape):
    return tuple(slice(o, o + n) for o, n in zip(offset, shape))


def assemble(dumps):
    """name -> the global tensor put together from the ranks' boxes (NaN or
    -1 where no rank had a box)."""
    shapes = {}
    for d in dumps:
        for name, (off, t) in d["tensors"].items():
            end = [o + n for o, n in zip(off, t.shape)]
            shapes[name] = [max(a, b) for a, b in zip(shapes.get(name, end), end)]
    full = {}
    for d in dumps:
        for name, (off, t) in d["tensors"].items():
            if name not in full:
                full[name] = torch.full(shapes[name], float("nan") if t.is_floating_point()
                                        else -1, dtype=t.dtype)
            full[name][slices(off, t.shape)] = t
    return full


class TpReshard(unittest.TestCase):
    def test_four_way_checkpoint_loads_two_way_exactly(self):
        with tempfile.TemporaryDirectory(prefix="dcp-tp-") as root:
            ckpt = os.path.join(root, "ckpt")
            saved = run("save", 4, root, ckpt)
            loaded = run("load", 2, root, ckpt)
            full = assemble(saved)
            for name, t in full.items():
                hole = torch.isnan(t) if t.is_floating_point() else t == -1
                self.assertFalse(hole.any().item(), "%s: a hole in the saved boxes" % name)
            for r, d in enumerate(loaded):
                self.assertEqual(sorted(d["tensors"]), sorted(full), "rank %d" % r)
                for name, (off, t) in d["tensors"].items():
                    want = full[name][slices(off, t.shape)]
                    self.assertTrue(torch.equal(t, want), "rank %d: %s" % (r, name))
                # a 2-way shard of w1 spans two 4-way shards
                off, w1 = d["tensors"]["model.w1"]
                self.assertEqual((tuple(off), tuple(w1.shape)), ((10 * r, 0), (10, 6)))
                self.assertEqual(tuple(d["tensors"]["optim.w2.exp_avg"][1].shape), (6, 10))
                self.assertAlmostEqual(d["loss3"], saved[0]["loss3"], delta=1e-5 * saved[0]["loss3"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
