"""Attacks on dcp.CheckpointManager: retention counts and step numbers
that do not fit their C fields or are not integers (a count that wrapped
around deleted steps; a step 1.7 was saved as step 1), a preemption grace
that is not a duration, and the calls that must keep working (async
save, then the mutation, then wait; a closed manager). Run: python3
test_attack_manager.py."""

import unittest

import numpy as np

import dcp
from dcp import _dcp
from dcp_testkit import DcpCase


class Manager(DcpCase):
    tmp_prefix = "dcp-attack-mgr-"

    def committed(self, mgr):
        return [s.step for s in mgr.steps() if s.state == "committed"]

    def test_counts_that_do_not_fit_are_refused_not_wrapped(self):
        a = np.arange(4, dtype=np.float32)
        with dcp.CheckpointManager(self.ctx, self.path("r"), quiet=True) as mgr:
            for step in range(3):
                mgr.save(step, {"a": a})
        for kw in (dict(keep_last=2 ** 32 + 1), dict(keep_last=-1), dict(keep_every=-5),
                   dict(max_bytes=-1), dict(max_bytes=2 ** 64 + 10), dict(keep_last=1.5),
                   dict(keep=[-1]), dict(keep="12"), dict(keep=[2.5])):
            with self.assertRaises(dcp.InvalidError, msg=str(kw)) as cm:
                dcp.CheckpointManager(self.ctx, self.path("r"), quiet=True, **kw)
            self.assertIn(list(kw)[0], str(cm.exception))
        # the binding itself checks too (keep_last=2**32+1 was 1: it kept one step)
        for kw in (dict(keep_last=2 ** 32 + 1), dict(keep_last=-1), dict(max_bytes=-1)):
            with self.assertRaises((dcp.InvalidError, OverflowError), msg=str(kw)):
                _dcp.Manager(self.ctx, self.path("r"), quiet=True, **kw)
        with dcp.CheckpointManager(self.ctx, self.path("r"), keep_last=2, quiet=True) as mgr:
            self.assertEqual(self.committed(mgr), [0, 1, 2])
            mgr.save(3, {"a": a})
            self.assertEqual(self.committed(mgr), [2, 3])

    def test_steps_must_be_integers_in_range(self):
        a = np.arange(4, dtype=np.float32)
        with dcp.CheckpointManager(self.ctx, self.path("r"), quiet=True) as mgr:
            for step in (1.7, True, "3", -1, 2 ** 63, None):
                for call in (lambda: mgr.save(step, {"a": a}),
                             lambda: mgr.save_async(step, {"a": a}),
                             lambda: mgr.step_path(step),
                             lambda: mgr.save_now(step, {"a": a}, grace=5)):
                    with self.assertRaises(dcp.InvalidError, msg=repr(step)) as cm:
                        call()
                    self.assertIn("step", str(cm.exception))
            self.assertEqual(mgr.steps(), [])
            mgr.save(np.int64(4), {"a": a})  # an integer of numpy is an integer
            self.assertEqual(self.committed(mgr), [4])
            for grace in (-1, float("nan"), float("inf"), 1e300, "5"):
                with self.assertRaises(dcp.InvalidError, msg=repr(grace)):
                    mgr.save_now(5, {"a": a}, grace=grace)
            self.assertEqual(self.committed(mgr), [4])

    def test_save_async_under_background_staging_returns_staged(self):
        n = 1 << 24
        a = np.arange(n, dtype=np.float32)
        want = a.copy()
        self.ctx.set_async_staging(True)  # the manager has no fence of its own
        with dcp.CheckpointManager(self.ctx, self.path("r"), quiet=True) as mgr:
            mgr.save_async(1, {"a": a})
            a[:] = -1  # "returns once staged (the buffers may change)"
            mgr.wait()
            got = np.zeros(n, np.float32)
            mgr.load(1, {"a": got})
        np.testing.assert_array_equal(got, want)
        self.ctx.set_async_staging(False)
        self.ctx.async_shutdown()

    def test_async_step_keeps_its_values_and_a_closed_manager_refuses(self):
        a = np.arange(1 << 20, dtype=np.float32)
        want = a.copy()
        mgr = dcp.CheckpointManager(self.ctx, self.path("r"), quiet=True)
        mgr.save_async(7, {"a": a})
        a[:] = -1  # staged: the save keeps the old values
        mgr.wait()
        got = np.zeros_like(a)
        self.assertEqual(mgr.restore({"a": got}), 7)
        np.testing.assert_array_equal(got, want)
        with self.assertRaises(dcp.InvalidError):
            mgr.save(7, {"a": a})  # not newer than the newest durable step
        mgr.close()
        for call in (lambda: mgr.save(8, {"a": a}), mgr.steps, lambda: mgr.load(7, {"a": got})):
            with self.assertRaises(dcp.InvalidError):
                call()
        mgr.close()  # twice: a no-op
        self.ctx.async_shutdown()


if __name__ == "__main__":
    unittest.main()
