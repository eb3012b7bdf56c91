"""The binding's background staging, fence and prepare (dcp._dcp):
Context.set_async_staging(True) makes async_save return before the copy,
AsyncSave.fence() / `with handle:` waits for it, the handle keeps the
staged state alive until then, Context.async_prepare() readies the writer
and pool. Run: python3 test_async_stage.py."""

import unittest

import numpy as np

import dcp
from dcp import _dcp
from dcp_testkit import DcpCase

N = 1 << 20


class BadBool:
    def __bool__(self):
        raise ValueError("no truth value")


class Staging(DcpCase):
    tmp_prefix = "dcp-py-stage-"

    def tearDown(self):
        self.ctx.async_shutdown()
        super().tearDown()

    def load(self, name):
        got = np.full(N, -1, dtype=np.float32)
        dcp.load(self.ctx, {"a": got}, self.path(name))
        return got

    def test_fence_then_optimizer_step(self):
        a = np.arange(N, dtype=np.float32)
        want = a.copy()
        self.ctx.set_async_staging(True)
        st = dcp.build_state(self.ctx, {"a": a})[0]
        self.ctx.async_prepare(st)
        h = _dcp.async_save(self.ctx, st, self.path("c1"))
        del st  # the handle keeps the state until its staging is over
        with h:  # the fence
            a += 1  # the optimizer step
        self.assertIs(h.fence(), h)  # again: at once
        h.wait()
        np.testing.assert_array_equal(self.load("c1"), want)
        del h

    def test_wait_implies_the_fence(self):
        a = np.arange(N, dtype=np.float32) * 2
        want = a.copy()
        self.ctx.set_async_staging(True)
        h = _dcp.async_save(self.ctx, dcp.build_state(self.ctx, {"a": a})[0], self.path("c2"))
        h.wait()
        a[:] = 0
        np.testing.assert_array_equal(self.load("c2"), want)
        self.assertIs(h.fence(), h)
        del h

    def test_blocking_staging_fence_is_immediate(self):
        a = np.ones(N, dtype=np.float32)
        self.ctx.set_async_staging(False)
        self.ctx.async_prepare()  # no state: the writer only
        h = _dcp.async_save(self.ctx, dcp.build_state(self.ctx, {"a": a})[0], self.path("c3"))
        h.fence()
        a[:] = 5
        h.wait()
        np.testing.assert_array_equal(self.load("c3"), np.ones(N, dtype=np.float32))
        del h

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            self.ctx.set_async_staging(BadBool())
        other = dcp.Context()
        st = dcp.build_state(other, {"a": np.zeros(4, dtype=np.float32)})[0]
        with self.assertRaises(dcp.Error):
            self.ctx.async_prepare(st)
        del st
        other.close()


if __name__ == "__main__":
    unittest.main()
