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


class Names(DcpCase):
    tmp_prefix = "dcp-attack-nul-"

    def test_nul_in_a_tensor_name_is_refused(self):
        with self.assertRaises(dcp.InvalidError) as cm:
            dcp.save(self.ctx, {"a\0b": np.zeros(2, np.float32)}, self.path("c"))
        self.assertIn("NUL", str(cm.exception))
        st = dcp.State(self.ctx)
        st.add_tensor("a", dcp.F32, (2,))
        with self.assertRaises(dcp.InvalidError):  # would have been chunk of 'a'
            st.add_chunk("a\0zzz", (0,), (2,), np.zeros(2, np.float32))
        with self.assertRaises(dcp.InvalidError):
            st.add_sharded("s\0", dcp.F32, (2,), dcp.Layout((1,), (0,)), np.zeros(2, np.float32))
        del st
        self.assertFalse(dcp.committed(self.ctx, self.path("c")))

    def test_nul_in_a_bytes_key_or_kv_is_refused(self):
        with self.assertRaises(dcp.InvalidError):
            dcp.save(self.ctx, {"k\0z": b"hi"}, self.path("c"))
        for kv in ({"a\0b": "v"}, {"a": "v\0w"}):
            with self.assertRaises(dcp.InvalidError):
                dcp.save(self.ctx, {"x": np.zeros(2, np.float32)}, self.path("c"), kv=kv)
        self.assertFalse(dcp.committed(self.ctx, self.path("c")))

    def test_nul_in_a_lookup_name(self):
        dcp.save(self.ctx, {"a": np.arange(2, dtype=np.float32)}, self.path("c"))
        meta = dcp.meta_open(self.ctx, self.path("c"))
        with self.assertRaises(dcp.InvalidError):
            meta.tensor("a\0b")  # not 'a'
        self.assertEqual(meta.tensor("a")["fqn"], "a")
        del meta
        with self.assertRaises(dcp.InvalidError):
            dcp.Context(world_size=1, storage="posix\0evil")


if __name__ == "__main__":
    unittest.main()
