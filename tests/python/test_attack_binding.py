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

    def test_read_tensor_checks_the_element_size_and_byte_order(self):
        dcp.save(self.ctx, {"x": np.arange(4, dtype=np.float32)}, self.path("c"))
        meta = dcp.meta_open(self.ctx, self.path("c"))
        for out in (np.zeros(2, np.float64), np.zeros(4, BIG + "f4")):  # the right byte length
            with self.assertRaises(dcp.InvalidError) as cm:
                meta.read_tensor("x", out)
            self.assertIn("'x'", str(cm.exception))
            self.assertFalse(out.any())
        raw, got = bytearray(16), np.zeros(4, np.float32)
        meta.read_tensor("x", raw)  # bytes are taken raw
        meta.read_tensor("x", got)
        del meta
        np.testing.assert_array_equal(np.frombuffer(raw, np.float32), got)
        np.testing.assert_array_equal(got, [0, 1, 2, 3])

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

    def test_a_lone_surrogate_is_refused_naming_it(self):
        for items in ({"a\udc80": np.zeros(2, np.float32)}, {"b\ud800": b"x"}):
            with self.assertRaises(dcp.InvalidError) as cm:
                dcp.save(self.ctx, items, self.path("c"))
            self.assertIn("surrogate", str(cm.exception))
        with self.assertRaises(dcp.InvalidError):
            dcp.save(self.ctx, {"x": np.zeros(2, np.float32)}, self.path("c"), kv={"k": "\udc80"})

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


class Extents(DcpCase):
    tmp_prefix = "dcp-attack-ext-"

    def test_shapes_past_int64(self):
        st = dcp.State(self.ctx)
        with self.assertRaises(dcp.InvalidError) as cm:
            st.add_tensor("h", dcp.F32, (2 ** 64,))
        self.assertIn("shape[0]", str(cm.exception))
        with self.assertRaises(dcp.InvalidError) as cm:
            st.add_tensor("h", dcp.F32, (1, -2 ** 70))
        self.assertIn("shape[1]", str(cm.exception))
        with self.assertRaises(dcp.InvalidError) as cm:  # more dims than libdcp has
            st.add_tensor("deep", dcp.F32, (1,) * 17)
        self.assertIn("'deep'", str(cm.exception))
        with self.assertRaises(dcp.SizeOverflowError):  # fits, but the element count does not
            st.add_tensor("h", dcp.F32, (2 ** 40, 2 ** 40))
        with self.assertRaises(dcp.InvalidError):
            st.add_tensor("h", dcp.F32, (-1, 4))
        st.add_tensor("g", dcp.U8, (2 ** 62,))
        with self.assertRaises(dcp.Error):  # past the end, or overflowing int64
            st.add_chunk("g", (2 ** 63 - 1,), (2,), np.zeros(2, np.uint8))
        with self.assertRaises(dcp.InvalidError) as cm:
            st.add_chunk("g", (2 ** 63,), (1,), np.zeros(1, np.uint8))
        self.assertIn("offset[0]", str(cm.exception))
        with self.assertRaises(dcp.InvalidError):
            st.add_bytes("b", b"x", 77)  # no such scope
        with self.assertRaises(dcp.InvalidError):  # was F32: the code truncated to 32 bits
            st.add_tensor("d", 2 ** 32 + dcp.F32, (2,))
        self.assertEqual(st.tensor_count, 1)  # 'g' only

    def test_zero_size_0d_and_unaligned_buffers(self):
        dcp.save(self.ctx, {"z": np.zeros((0, 3), np.float32), "s": np.array(3.5),
                            "u": np.arange(5, dtype=np.float32)}, self.path("c"))
        z, s = np.zeros((0, 3), np.float32), np.array(0.0)
        raw = bytearray(4 * 5 + 1)
        u = np.frombuffer(raw, dtype=np.float32, offset=1, count=5)  # not aligned
        self.assertFalse(u.flags.aligned)
        dcp.load(self.ctx, {"z": z, "s": s, "u": u}, self.path("c"))
        self.assertEqual(float(s), 3.5)
        np.testing.assert_array_equal(u, np.arange(5, dtype=np.float32))

    def test_read_only_destinations_are_not_written(self):
        dcp.save(self.ctx, {"x": np.arange(4, dtype=np.float32), "b": b"abcd"}, self.path("c"))
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        for items in ({"x": ro}, {"b": bytes(4)}, {"x": memoryview(bytearray(16)).toreadonly()
                                                   .cast("f")}):
            with self.assertRaises(dcp.InvalidError) as cm:
                dcp.load(self.ctx, items, self.path("c"))
            self.assertIn("read-only", str(cm.exception))
        np.testing.assert_array_equal(ro, np.zeros(4))

    def test_closed_context_and_a_context_used_from_two_threads(self):
        other = dcp.Context()
        other.close()
        with self.assertRaises(dcp.InvalidError):
            dcp.save(other, {"x": np.zeros(2)}, self.path("c"))
        with self.assertRaises(dcp.InvalidError):
            dcp.State(other)
        other.close()  # twice: a no-op
        errors, ok = [], []

        def saver(i):
            for j in range(4):
                try:
                    dcp.save(self.ctx, {"x": np.full(1 << 16, i, np.int32)},
                             self.path("t%d-%d" % (i, j)))
                    ok.append((i, j))
                except dcp.InvalidError as e:
                    errors.append(str(e))
        threads = [threading.Thread(target=saver, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertTrue(all("another thread" in e for e in errors), errors)
        for i, j in ok:  # every save that returned holds its own values
            got = np.zeros(1 << 16, np.int32)
            dcp.load(self.ctx, {"x": got}, self.path("t%d-%d" % (i, j)))
            self.assertTrue((got == i).all())


class Options(DcpCase):
    tmp_prefix = "dcp-attack-opt-"

    def test_integer_options_are_range_checked_not_wrapped(self):
        a = np.arange(4, dtype=np.float32)
        # flags=2**32+1 was flags=1, block_size=2**32+8192 was 8192, save_id=-1 was 2**64-1
        for opts in (dict(flags=-1), dict(flags=2 ** 32 + 1), dict(block_size=-1),
                     dict(block_size=2 ** 32 + 8192), dict(save_id=-1), dict(save_id=2 ** 64 + 5),
                     dict(flags=1.0), dict(block_size="4096"), dict(flags=True)):
            with self.assertRaises(dcp.InvalidError, msg=str(opts)) as cm:
                dcp.save(self.ctx, {"a": a}, self.path("c"), **opts)
            self.assertIn(list(opts)[0], str(cm.exception))
        self.assertFalse(dcp.committed(self.ctx, self.path("c")))
        dcp.save(self.ctx, {"a": a}, self.path("c"), block_size=np.uint32(8192), save_id=2 ** 64 - 1)
        for opts in (dict(flags=2 ** 32), dict(flags=-1), dict(max_inflight_bytes=-1),
                     dict(max_inflight_bytes=2 ** 64)):
            with self.assertRaises(dcp.InvalidError, msg=str(opts)):
                dcp.load(self.ctx, {"a": np.zeros(4, np.float32)}, self.path("c"), **opts)
        got = np.zeros(4, np.float32)
        dcp.load(self.ctx, {"a": got}, self.path("c"), max_inflight_bytes=1)
        np.testing.assert_array_equal(got, a)
        for opts in (dict(keep=2 ** 32 + 1), dict(keep=-1), dict(budget_bytes=-1),
                     dict(replicas=2 ** 32)):
            with self.assertRaises(dcp.InvalidError, msg=str(opts)):
                self.ctx.set_memtier(**opts)
        with self.assertRaises(dcp.InvalidError):
            dcp.export_safetensors(self.ctx, self.path("c"), self.path("st"), max_shard_bytes=-1)


class Staging(DcpCase):
    tmp_prefix = "dcp-attack-stage-"

    def tearDown(self):
        self.ctx.async_shutdown()
        super().tearDown()

    def test_a_load_during_background_staging_does_not_change_the_save(self):
        n = 1 << 22
        dcp.save(self.ctx, {"a": np.full(n, -5.0, np.float32)}, self.path("other"))
        a = np.arange(n, dtype=np.float32)
        want = a.copy()
        self.ctx.set_async_staging(True)
        for load in (lambda: dcp.load(self.ctx, {"a": a}, self.path("other")),
                     lambda: dcp.load(self.ctx, dcp.build_state(self.ctx, {"a": a})[0],
                                      self.path("other"))):
            a[:] = want
            h = dcp._dcp.async_save(self.ctx, dcp.build_state(self.ctx, {"a": a})[0],
                                    self.path("c"), overwrite=True)
            load()  # into the buffer being staged: the binding fences first
            self.assertEqual(float(a[0]), -5.0)
            h.wait()
            del h
            got = np.zeros(n, np.float32)
            dcp.load(self.ctx, {"a": got}, self.path("c"))
            np.testing.assert_array_equal(got, want)

    def test_the_packages_future_is_staged_when_it_says_so(self):
        n = 1 << 24
        a = np.arange(n, dtype=np.float32)
        want = a.copy()
        self.ctx.set_async_staging(True)
        fut = dcp.async_save(self.ctx, {"a": a}, self.path("c"))
        self.assertTrue(fut.staged)
        a[:] = -1  # "the buffers may change"
        fut.wait()
        del fut
        got = np.zeros(n, np.float32)
        dcp.load(self.ctx, {"a": got}, self.path("c"))
        np.testing.assert_array_equal(got, want)


if __name__ == "__main__":
    unittest.main()
