"""The memory tier from Python: Context.set_memtier, a kept async save, a
second context (a restarted trainer: no writer of its own) that loads it
from the writer's memory (Context.stats()['mem_tier'] == 1, every data
byte from memory), another job that finds nothing, memtier_stop. The
process-level restart (a SIGKILLed trainer) is tests/recovery. Run:
python3 test_memtier.py."""

import os
import tempfile
import time
import unittest

import numpy as np

import dcp

USED, NONE = 1, 2


class MemoryTier(unittest.TestCase):
    def test_restore_from_the_writers_memory(self):
        job = "py-memtier-%d" % os.getpid()
        with tempfile.TemporaryDirectory(prefix="dcp-py-mem-") as d:
            ckpt = os.path.join(d, "ckpt")
            a = np.arange(1 << 18, dtype=np.float32)
            trainer = dcp.Context()
            trainer.set_memtier(keep=1, linger_ms=30000, job=job)
            dcp.async_save(trainer, {"a": a, "step": b"step-7"}, ckpt).wait()
            restarted = dcp.Context()
            restarted.set_memtier(job=job)
            stats = {}
            for _ in range(100):  # the writer copies the snapshot after the save
                got = np.zeros_like(a)
                step = bytearray(6)
                dcp.load(restarted, {"a": got, "step": step}, ckpt)
                stats = restarted.stats()
                if stats["mem_tier"] == USED:
                    break
                time.sleep(0.05)
            self.assertEqual(stats["mem_tier"], USED)
            self.assertGreaterEqual(stats["mem_read_bytes"], a.nbytes)
            self.assertEqual(stats["data_read_bytes"], 0)
            np.testing.assert_array_equal(got, a)
            self.assertEqual(bytes(step), b"step-7")
            other = dcp.Context()
            other.set_memtier(job=job + "-other")
            got2 = np.zeros_like(a)
            dcp.load(other, {"a": got2}, ckpt)
            self.assertEqual(other.stats()["mem_tier"], NONE)
            np.testing.assert_array_equal(got2, a)
            restarted.memtier_stop()
            for c in (other, restarted):
                c.close()
            trainer.async_shutdown()
            trainer.close()


if __name__ == "__main__":
    unittest.main()
