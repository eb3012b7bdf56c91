"""Replica check from Python: two ranks of the file collective in one
process (a thread each). A save with check_replicas=True over equal copies
succeeds and loads back; after one bit of rank 1's copy is flipped,
Context.check_replicas reports it (report_only) or raises dcp.ReplicaError
naming the fqn, the box and both ranks, and a checked overwrite raises it
too while the previous checkpoint still loads. Run: python3
test_replica_check.py."""

import os
import tempfile
import threading
import unittest

import numpy as np

import dcp


def run_ranks(fn):
    """fn(rank, ctx) on ranks 0 and 1 at once; returns their results."""
    out, errors = [None, None], []
    with tempfile.TemporaryDirectory(prefix="dcp-py-rdv-") as rdv:
        def rank(r):
            ctx = None
            try:
                ctx = dcp.Context(rank=r, world_size=2, coll="file", rendezvous=rdv,
                                  timeout_ms=60000)
                out[r] = fn(r, ctx)
            except Exception as e:  # reported by the main thread
                errors.append(e)
            finally:
                if ctx is not None:
                    ctx.close()

        threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    if errors:
        raise errors[0]
    return out


class ReplicaCheck(unittest.TestCase):
    def test_flipped_bit_is_caught_and_the_previous_checkpoint_stays(self):
        with tempfile.TemporaryDirectory(prefix="dcp-py-") as d:
            ckpt = os.path.join(d, "ckpt")

            def rank(r, ctx):
                w = np.arange(24, dtype=np.float32).reshape(4, 6)
                st, _ = dcp.build_state(ctx, {"w": w, "cfg": b"lr=1e-3"})
                dcp.save(ctx, st, ckpt, check_replicas=True)
                ok = ctx.check_replicas(st)
                if r == 1:
                    w.view(np.uint32)[2, 3] ^= 1 << 7
                report = ctx.check_replicas(st, report_only=True)
                try:
                    ctx.check_replicas(st)
                    raised = None
                except dcp.ReplicaError as e:
                    raised = e.message
                try:
                    dcp.save(ctx, st, ckpt, overwrite=True, check_replicas=True)
                    save_raised = None
                except dcp.ReplicaError as e:
                    save_raised = e.message
                back = np.zeros((4, 6), np.float32)
                dcp.load(ctx, {"w": back, "cfg": bytearray(7)}, ckpt)
                return ok, report, raised, save_raised, back

            for ok, report, raised, save_raised, back in run_ranks(rank):
                self.assertEqual(ok["mismatches"], 0)
                self.assertEqual(ok["boxes_checked"], 2)  # w and cfg, two holders each
                self.assertEqual(report["status"], dcp.EREPLICA)
                self.assertEqual(report["mismatches"], 1)
                for msg in (report["message"], raised, save_raised):
                    self.assertIsNotNone(msg)
                    self.assertIn("'w' box [0:4, 0:6]", msg)
                    self.assertIn("rank 0 (xxh3", msg)
                    self.assertIn("rank 1 (xxh3", msg)
                self.assertTrue(np.array_equal(
                    back, np.arange(24, dtype=np.float32).reshape(4, 6)))


if __name__ == "__main__":
    unittest.main()
