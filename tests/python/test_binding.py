"""Unit tests of the CPython binding (dcp._dcp) and the dcp package: round
trips through real saves and loads, resharding, layouts, bytes items, the
async handle, statistics, and every error path turning into a dcp.Error
subclass with the library's message. Run: python3 test_binding.py."""

import os
import tempfile
import threading
import time
import unittest

import numpy as np

import dcp
from dcp import _dcp
from dcp_testkit import DcpCase


class Base(DcpCase):
    pass


class RoundTrip(Base):
    def test_whole_tensors_of_several_dtypes_and_bytes(self):
        arrays = {
            "w.f32": np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5,
            "w.i64": np.arange(-5, 5, dtype=np.int64),
            "w.f16": np.linspace(-1, 1, 7).astype(np.float16),
            "w.bool": np.array([True, False, True]),
            "w.u8": np.frombuffer(b"\x00\x01\xfe\xff", dtype=np.uint8).copy(),
            "scalar": np.array(3.25, dtype=np.float64),
        }
        items = dict(arrays)
        items["blob"] = b"opaque \x00 bytes"
        items["mine"] = dcp.Bytes(b"rank zero", dcp.SCOPE_PER_RANK)
        dcp.save(self.ctx, items, self.path("c"), kv={"step": "7"})
        out = {k: np.zeros_like(v) for k, v in arrays.items()}
        dests = dict(out)
        dests["blob"] = dcp.Bytes(None)
        dests["mine"] = dcp.Bytes(None, dcp.SCOPE_PER_RANK)
        got = dcp.load(self.ctx, dests, self.path("c"))
        for k, v in arrays.items():
            self.assertEqual(out[k].tobytes(), v.tobytes(), k)
        self.assertEqual(bytes(got["blob"]), b"opaque \x00 bytes")
        self.assertEqual(bytes(got["mine"]), b"rank zero")
        meta = dcp.meta_open(self.ctx, self.path("c"))
        self.assertEqual(meta.kv(), {"step": "7"})
        self.assertEqual(sorted(t["fqn"] for t in meta.tensors()), sorted(arrays))
        self.assertEqual(meta.tensor("w.f32")["shape"], (3, 4))
        self.assertEqual(meta.tensor("w.f32")["dtype"], dcp.F32)
        lengths = {b["key"]: b["length"] for b in meta.bytes_items()}
        self.assertEqual(lengths, {"blob": 14, "mine": 9})
        whole = np.zeros((3, 4), np.float32)
        meta.read_tensor("w.f32", whole)
        self.assertTrue(np.array_equal(whole, arrays["w.f32"]))
        self.assertGreaterEqual(len(meta.files()), 1)

    def test_resharded_load_of_chunks(self):
        full = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
        # saved as two row blocks, loaded as two column blocks
        rows = [dcp.Chunk(full[:5].copy(), (0, 0), (8, 6)),
                dcp.Chunk(full[5:].copy(), (5, 0), (8, 6))]
        dcp.save(self.ctx, {"t": rows}, self.path("c"))
        left, right = np.zeros((8, 2), np.float32), np.zeros((8, 4), np.float32)
        dcp.load(self.ctx, {"t": [dcp.Chunk(left, (0, 0), (8, 6)),
                                  dcp.Chunk(right, (0, 2), (8, 6))]}, self.path("c"))
        self.assertTrue(np.array_equal(left, full[:, :2]))
        self.assertTrue(np.array_equal(right, full[:, 2:]))
        self.assertEqual(dcp.meta_open(self.ctx, self.path("c")).chunks("t"),
                         [((0, 0), (5, 6)), ((5, 0), (3, 6))])

    def test_flat_range_and_flat_to_boxes(self):
        full = np.arange(4 * 5, dtype=np.int32).reshape(4, 5)
        flat = full.reshape(-1)
        dcp.save(self.ctx, {"t": [dcp.Chunk(full, (0, 0), (4, 5))]}, self.path("c"))
        part = np.zeros(9, np.int32)
        dcp.load(self.ctx, {"t": dcp.Flat(part, 3, (4, 5))}, self.path("c"))
        self.assertTrue(np.array_equal(part, flat[3:12]))
        boxes = dcp.flat_to_boxes(((0, 0), (4, 5)), 3, 9)
        self.assertEqual(sum(int(np.prod(s)) for _, s in boxes), 9)
        self.assertEqual(boxes[0], ((0, 3), (1, 2)))

    def test_thin_state_api(self):
        st = dcp.State(self.ctx)
        a = np.ones((2, 2), np.float64)
        st.add_tensor("a", "F64", (2, 2))
        st.add_chunk("a", (0, 0), (2, 2), a)
        st.add_bytes("k", bytearray(b"xyz"))
        self.assertEqual((st.tensor_count, st.bytes_count), (1, 1))
        _dcp.save(self.ctx, st, self.path("c"), overwrite=True, compress=True, block_size=4096)
        self.assertTrue(dcp.committed(self.ctx, self.path("c")))
        self.assertFalse(dcp.committed(self.ctx, self.path("nothing")))
        report = dcp.verify(self.ctx, self.path("c"))
        self.assertEqual(report["problems"], 0)
        self.assertEqual(report["tensors"], 1)


class Conversions(Base):
    def test_safetensors_round_trip_with_progress(self):
        w = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
        dcp.save(self.ctx, {"w": w, "b": np.ones(3, np.int64)}, self.path("c"))
        calls = []
        self.ctx.set_progress(lambda done, total: calls.append((done, total)))
        dcp.export_safetensors(self.ctx, self.path("c"), self.path("st"))
        self.assertTrue(calls)
        self.assertEqual(calls[-1][0], calls[-1][1])  # done == total at the end
        self.assertEqual(calls[-1][1], w.nbytes + 3 * 8)
        self.ctx.set_progress(None)
        dcp.import_safetensors(self.ctx, self.path("st/model.safetensors"), self.path("back"))
        out = np.zeros_like(w)
        dcp.load(self.ctx, {"w": out}, self.path("back"))
        self.assertTrue(np.array_equal(out, w))
        with self.assertRaises(dcp.ExistsError):
            dcp.import_safetensors(self.ctx, self.path("st/model.safetensors"), self.path("back"))
        with self.assertRaises(TypeError):
            self.ctx.set_progress(42)

    def test_phase_progress_of_save_load_and_export(self):
        w = np.arange(300 * 64, dtype=np.float32).reshape(300, 64)
        calls = []
        _dcp.set_phase_progress(self.ctx, lambda *a: calls.append(a))
        dcp.save(self.ctx, {"w": w, "b": np.ones(3, np.int64)}, self.path("c"))
        out = np.zeros_like(w)
        dcp.load(self.ctx, {"w": out}, self.path("c"))
        dcp.export_safetensors(self.ctx, self.path("c"), self.path("st"))
        _dcp.set_phase_progress(self.ctx, None)
        dcp.verify(self.ctx, self.path("c"))  # no longer reported
        phases = [c[0] for c in calls]
        self.assertEqual(sorted(set(phases)), ["export", "load", "save"])
        for phase, total in (("save", w.nbytes + 24), ("load", w.nbytes),
                             ("export", w.nbytes + 24)):
            mine = [c for c in calls if c[0] == phase]
            self.assertEqual(mine[-1][1:], (total, total), phase)  # ends at done == total
            dones = [c[1] for c in mine]
            self.assertEqual(dones, sorted(dones), phase)  # never goes back
        with self.assertRaises(TypeError):
            _dcp.set_phase_progress(self.ctx, 42)

    def test_meta_from_memory_and_boxes(self):
        dcp.save(self.ctx, {"w": np.zeros((2, 3), np.float32)}, self.path("c"))
        with open(os.path.join(self.path("c"), ".metadata"), "rb") as f:
            data = f.read()
        m = dcp.meta_open_memory(self.ctx, data)
        self.assertEqual(m.tensor("w")["shape"], (2, 3))
        with self.assertRaises(dcp.InvalidError):
            m.read_tensor("w", np.zeros((2, 3), np.float32))
        with self.assertRaises(dcp.CorruptError):
            dcp.meta_open_memory(self.ctx, data[:-1])
        self.assertEqual(dcp.box_numel(((1, 2), (3, 4))), 12)
        self.assertEqual(dcp.box_intersect(((0, 0), (4, 4)), ((2, 3), (4, 4))), ((2, 3), (2, 1)))
        self.assertIsNone(dcp.box_intersect(((0,), (2,)), ((2,), (2,))))
        with self.assertRaises(dcp.InvalidError):
            dcp.box_intersect(((0,), (2,)), ((0, 0), (1, 1)))
        with self.assertRaises(dcp.InvalidError):
            dcp.box_numel(((0,), (-1,)))


class Layouts(Base):
    def test_boxes_and_replica_groups(self):
        # mesh [dp=2, tp=2]; dim 0 of the tensor sharded by tp (mesh dim 1)
        lay = dcp.Layout((2, 2), [(1,), None])
        self.assertEqual(lay.tensor_map, (2, 0))
        self.assertEqual(lay.box((10, 3), 0), ((0, 0), (5, 3)))
        self.assertEqual(lay.box((10, 3), 1), ((5, 0), (5, 3)))
        self.assertEqual(lay.box((10, 3), 3), ((5, 0), (5, 3)))
        self.assertEqual(lay.replica_group(1), (1, 3))
        with self.assertRaises(dcp.NotFoundError):
            lay.box((10, 3), 4)
        custom = dcp.Layout([4], [1], mesh_ranks=[3, 2, 1, 0])
        self.assertEqual(custom.box([8], 0), ((6,), (2,)))
        self.assertIn("mesh_shape=(4,)", repr(custom))

    def test_invalid_layout_carries_the_library_message(self):
        with self.assertRaises(dcp.InvalidError) as cm:
            dcp.Layout((2, 2), [1, 1])  # one mesh dim sharding two tensor dims
        self.assertEqual(cm.exception.status, dcp.EINVAL)
        self.assertEqual(cm.exception.code, "DCP_EINVAL")
        self.assertNotEqual(cm.exception.message, dcp.strerror(dcp.EINVAL))
        with self.assertRaises(dcp.InvalidError):
            dcp.Layout((2,), [1], mesh_ranks=[0, 0])

    def test_sharded_items_of_detached_ranks_and_resharded_load(self):
        full = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
        lay4 = dcp.Layout([3], [1, 0])
        # a detached rank 1 of 3 builds its state: its box is rows 2..3
        ctx1 = dcp.Context(rank=1, world_size=3)
        st = dcp.State(ctx1)
        st.add_sharded("w", dcp.F32, (6, 4), lay4, full[2:4].copy())
        with self.assertRaises(dcp.InvalidError) as cm:
            st.add_sharded("v", dcp.F32, (6, 4), lay4, full[:3].copy())
        self.assertIn("'v'", str(cm.exception))
        del st
        ctx1.close()
        # one rank saves the whole mesh's worth as a mesh of one, then loads
        # it into a column split
        dcp.save(self.ctx, {"w": dcp.Sharded(full, (6, 4), dcp.Layout([1], [1, 0]))},
                 self.path("c"))
        cols = np.zeros((6, 2), np.float32)
        dcp.load(self.ctx, {"w": dcp.Chunk(cols, (0, 2), (6, 4))}, self.path("c"))
        self.assertTrue(np.array_equal(cols, full[:, 2:]))


    def test_flat_sharded_ranges_plan_per_rank_and_load_whole(self):
        """ZeRO shards from a layout: a DP2 x TP2 mesh, the weight's TP cell
        cut over DP (flat_dims 0b01), a TP-replicated bias cut over DP only;
        four ranks (threads of the file collective) save without a plan
        gather, and one rank loads every tensor whole."""
        w = np.arange(6 * 5, dtype=np.float32).reshape(6, 5)
        b = np.arange(7, dtype=np.float32) * 3
        lw = dcp.Layout((2, 2), [(1,), None])  # TP shards dim 0
        lb = dcp.Layout((2, 2), [None])       # replicated: cut over DP only
        cell, begin, count = lw.flat_range((6, 5), 3, 1)
        self.assertEqual(cell, ((3, 0), (3, 5)))
        self.assertEqual((begin, count), (8, 7))
        with self.assertRaises(dcp.InvalidError):
            lw.flat_range((6, 5), 3, 2)  # TP shards the tensor: not a flat dim
        with tempfile.TemporaryDirectory(prefix="dcp-py-") as d:
            rdv, ckpt = os.path.join(d, "rdv"), os.path.join(d, "ckpt")
            os.mkdir(rdv)
            paths, errors = [None] * 4, []

            def rank(r):
                try:
                    ctx = dcp.Context(rank=r, world_size=4, coll="file", rendezvous=rdv,
                                      timeout_ms=60000)
                    items = {}
                    for name, full, lay in (("w", w, lw), ("b", b, lb)):
                        (off, size), lo, n = lay.flat_range(full.shape, r, 1)
                        region = full[tuple(slice(o, o + s) for o, s in zip(off, size))]
                        items[name] = dcp.FlatSharded(region.reshape(-1)[lo:lo + n].copy(),
                                                      full.shape, lay, flat_dims=1)
                    dcp.save(ctx, items, ckpt)
                    paths[r] = ctx.stats()["save_plan_path"]
                    ctx.close()
                except Exception as e:  # reported by the main thread
                    errors.append(e)

            threads = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            self.assertEqual(errors, [])
            self.assertEqual(paths, [1, 1, 1, 1])
            got_w, got_b = np.zeros_like(w), np.zeros_like(b)
            dcp.load(self.ctx, {"w": got_w, "b": got_b}, ckpt)
            self.assertTrue(np.array_equal(got_w, w))
            self.assertTrue(np.array_equal(got_b, b))


class Errors(Base):
    def saved(self):
        dcp.save(self.ctx, {"w": np.arange(4, dtype=np.float32)}, self.path("c"))
        return self.path("c")

    def test_bad_dtype(self):
        st = dcp.State(self.ctx)
        with self.assertRaises(dcp.InvalidError) as cm:
            st.add_tensor("w", "F33", (2,))
        self.assertIn("F33", str(cm.exception))
        with self.assertRaises(dcp.InvalidError):
            st.add_tensor("w", 99, (2,))
        with self.assertRaises(dcp.InvalidError):
            dcp.dtype_of(np.zeros(2, dtype="S3"))

    def test_buffer_size_and_itemsize_are_checked(self):
        st = dcp.State(self.ctx)
        st.add_tensor("w", dcp.F32, (4,))
        with self.assertRaises(dcp.InvalidError) as cm:
            st.add_chunk("w", (0,), (4,), np.zeros(3, np.float32))
        self.assertIn("'w'", str(cm.exception))
        self.assertIn("length", str(cm.exception))
        with self.assertRaises(dcp.InvalidError) as cm:
            st.add_chunk("w", (0,), (4,), np.zeros(2, np.float64))  # 16 bytes, 8-byte items
        self.assertIn("element size", str(cm.exception))
        with self.assertRaises(dcp.NotFoundError):
            st.add_chunk("nope", (0,), (4,), np.zeros(4, np.float32))
        with self.assertRaises(dcp.BoundsError):
            st.add_chunk("w", (2,), (4,), np.zeros(4, np.float32))
        with self.assertRaises((TypeError, ValueError, BufferError)):
            st.add_chunk("w", (0,), (4,), np.zeros(8, np.float32)[::2])  # not contiguous
        st.add_chunk("w", (0,), (4,), np.zeros(4, np.float32))
        with self.assertRaises(dcp.OverlapError):
            st.add_chunk("w", (0,), (4,), np.zeros(4, np.float32))

    def test_missing_fqn_on_load_names_it(self):
        path = self.saved()
        with self.assertRaises(dcp.NotFoundError) as cm:
            dcp.load(self.ctx, {"absent": np.zeros(4, np.float32)}, path)
        self.assertEqual(cm.exception.status, dcp.ENOTFOUND)
        self.assertIn("absent", cm.exception.message)
        self.assertEqual(self.ctx.last_status(), dcp.ENOTFOUND)
        self.assertIn("absent", self.ctx.last_error())
        with self.assertRaises(dcp.NotFoundError):
            dcp.load(self.ctx, {"w": np.zeros(4, np.float32), "b": dcp.Bytes(None)}, path)

    def test_mismatch_exists_names_and_scopes(self):
        path = self.saved()
        with self.assertRaises(dcp.MismatchError):
            dcp.load(self.ctx, {"w": np.zeros(4, np.int32)}, path)
        with self.assertRaises(dcp.ExistsError):
            self.saved()
        dcp.save(self.ctx, {"w": np.ones(4, np.float32)}, path, overwrite=True)
        with self.assertRaises(dcp.InvalidNameError):
            dcp.save(self.ctx, {"": np.ones(1, np.float32)}, self.path("d"))
        st = dcp.State(self.ctx)
        st.add_bytes("k", b"1")
        with self.assertRaises(dcp.ExistsError):
            st.add_bytes("k", b"2")
        with self.assertRaises(dcp.InvalidError):
            st.add_bytes("s", b"1", scope=7)
        with self.assertRaises(dcp.IncompleteError):
            dcp.meta_open(self.ctx, self.dir)  # a directory without .metadata

    def test_read_only_buffer_cannot_be_loaded_into(self):
        path = self.saved()
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        with self.assertRaises(dcp.InvalidError) as cm:
            dcp.load(self.ctx, {"w": ro}, path)
        self.assertIn("read-only", str(cm.exception))
        with self.assertRaises(dcp.InvalidError):
            dcp.load(self.ctx, {"w": np.zeros(4, np.float32), "b": dcp.Bytes(b"\0")}, path)

    def test_corrupt_block_is_reported(self):
        path = self.saved()
        data = [f for f in os.listdir(path) if f.endswith(".dcp")][0]  # a data file
        with open(os.path.join(path, data), "r+b") as f:
            f.seek(0)
            byte = f.read(1)
            f.seek(0)
            f.write(bytes([byte[0] ^ 0xFF]))
        with self.assertRaises(dcp.CorruptError) as cm:
            dcp.load(self.ctx, {"w": np.zeros(4, np.float32)}, path)
        self.assertIn("w", cm.exception.message)
        self.assertGreater(dcp.verify(self.ctx, path)["problems"], 0)

    def test_context_lifetime(self):
        st = dcp.State(self.ctx)
        with self.assertRaises(dcp.InvalidError):  # a state is alive
            self.ctx.close()
        other = dcp.Context()
        with self.assertRaises(dcp.InvalidError) as cm:
            _dcp.save(other, st, self.path("c"))
        self.assertIn("another context", str(cm.exception))
        del st
        other.close()
        with self.assertRaises(dcp.InvalidError):
            dcp.State(other)
        with self.assertRaises(dcp.PluginError) as cm:
            dcp.Context(coll="nosuchcoll")
        self.assertIn("nosuchcoll", cm.exception.message)
        with self.assertRaises(dcp.InvalidError):
            dcp.Context(coll="no/such")
        with self.assertRaises(dcp.InvalidError):
            dcp.Context(rank=3, world_size=2)


class Uncoordinated(Base):
    """Detached ranks (no collective) name their save with save_id; a load
    takes only the newest save every rank committed."""

    def save_rank(self, rank, value, **options):
        """None, or (error class, message) of a failed save."""
        ctx = dcp.Context(rank=rank, world_size=2, lease_ms=1000)
        w = np.full((4, 3), value, dtype=np.float32)  # replicated: both write it
        failed = None
        try:
            dcp.save(ctx, {"w": w}, self.path("u"), overwrite=True, **options)
        except dcp.Error as e:
            failed = (type(e), e.message)  # not e: its traceback keeps the state alive
        ctx.close()
        return failed

    def loaded(self):
        out = np.zeros((4, 3), dtype=np.float32)
        dcp.load(self.ctx, {"w": out}, self.path("u"))
        return out

    def test_save_id_needed_and_no_mix(self):
        kind, message = self.save_rank(0, 1.0)
        self.assertIs(kind, dcp.InvalidError)
        self.assertIn("save_id", message)
        self.save_rank(0, 1.0, save_id=1)
        self.save_rank(1, 1.0, save_id=1)
        self.assertTrue((self.loaded() == 1.0).all())
        self.save_rank(0, 2.0, save_id=2)  # rank 1 never saves 2
        self.assertTrue((self.loaded() == 1.0).all())
        meta = dcp.meta_open(self.ctx, self.path("u"))
        self.assertEqual(meta.world_size, 2)
        self.save_rank(1, 2.0, save_id=2)
        self.assertTrue((self.loaded() == 2.0).all())


class Async(Base):
    def test_staged_then_persisted_with_the_staged_values(self):
        a = np.arange(1000, dtype=np.float32)
        fut = dcp.async_save(self.ctx, {"a": a, "b": bytearray(b"before")}, self.path("c"))
        self.assertTrue(fut.staged)
        a[:] = -1  # staged: the save must not see this
        fut.wait()
        self.assertTrue(fut.done())
        self.assertTrue(fut.persisted)
        self.assertIsNone(fut.exception())
        self.assertEqual(fut.path, self.path("c"))
        stats = self.ctx.stats()
        self.assertGreaterEqual(stats["data_bytes"], 4000)
        self.assertGreater(stats["bytes_written"], 4000)
        out = np.zeros(1000, np.float32)
        got = dcp.load(self.ctx, {"a": out, "b": dcp.Bytes(None)}, self.path("c"))
        self.assertTrue(np.array_equal(out, np.arange(1000, dtype=np.float32)))
        self.assertEqual(bytes(got["b"]), b"before")

    def test_a_failed_async_save_raises_from_wait(self):
        dcp.save(self.ctx, {"a": np.zeros(2, np.float32)}, self.path("c"))
        fut = dcp.async_save(self.ctx, {"a": np.ones(2, np.float32)}, self.path("c"))
        with self.assertRaises(dcp.ExistsError) as cm:
            fut.wait()
        self.assertTrue(cm.exception.message)
        self.assertFalse(fut.persisted)
        self.assertIsInstance(fut.exception(), dcp.ExistsError)
        with self.assertRaises(dcp.ExistsError):  # the same outcome again
            fut.wait()
        self.assertEqual(fut._h.status, dcp.EEXIST)

    def test_wait_with_a_timeout_then_abort(self):
        # a context whose writer starts every job 3 s late (a test hook of
        # dcp-writer, read from the environment it is spawned with)
        os.environ["DCP_WRITER_DELAY_MS"] = "3000"
        try:
            slow = dcp.Context()
            fut = dcp.async_save(slow, {"a": np.ones(4, np.float32)}, self.path("slow"))
        finally:
            del os.environ["DCP_WRITER_DELAY_MS"]
        with self.assertRaises(dcp.TimedOutError) as cm:
            fut.wait(timeout=0.2)
        self.assertIn("still persisting", cm.exception.message)
        self.assertFalse(fut.done())  # the save goes on
        fut.abort()
        self.assertTrue(fut.done())
        with self.assertRaises(dcp.PeerError) as cm:
            fut.wait()
        self.assertIn("aborted", cm.exception.message)
        self.assertFalse(fut.persisted)
        self.assertFalse(dcp.committed(slow, self.path("slow")))
        fut.abort()  # once finished: nothing happens
        # the next save spawns a fresh writer (no delay now) and commits
        fut = dcp.async_save(slow, {"a": np.ones(4, np.float32)}, self.path("after"))
        fut.wait(timeout=60)
        self.assertTrue(fut.persisted)
        with self.assertRaises(ValueError):
            fut.wait(timeout=-1)
        del fut  # the handle holds the context
        slow.close()


class Statistics(Base):
    def test_save_and_load_stats(self):
        dcp.save(self.ctx, {"a": np.zeros(256, np.float64), "k": b"12345"}, self.path("c"))
        s = self.ctx.stats()
        self.assertEqual(s["data_bytes"], 256 * 8 + 5)
        self.assertEqual(s["items_written"], 2)
        self.assertGreaterEqual(s["total_s"], 0.0)
        dcp.load(self.ctx, {"a": np.zeros(256, np.float64)}, self.path("c"))
        s = self.ctx.stats()
        self.assertEqual(s["bytes_written"], 0)
        self.assertGreaterEqual(s["data_read_bytes"], 256 * 8)


class Threads(unittest.TestCase):
    def test_gil_is_released_during_collective_calls(self):
        """Two ranks of the file collective in one process, one thread each:
        a collective call blocks in C until the other rank arrives, so both
        can only finish when the GIL is released while they wait. The busy
        context refuses a second user meanwhile."""
        with tempfile.TemporaryDirectory(prefix="dcp-py-") as d:
            rdv, ckpt = os.path.join(d, "rdv"), os.path.join(d, "ckpt")
            os.mkdir(rdv)
            ctxs, errors = [None, None], []
            started, go = threading.Event(), threading.Event()

            def rank(r):
                try:
                    ctxs[r] = dcp.Context(rank=r, world_size=2, coll="file", rendezvous=rdv,
                                          timeout_ms=60000)
                    if r == 1:
                        go.wait(60)
                    data = np.full(16, r, np.float32)
                    started.set()
                    dcp.save(ctxs[r], {"w": dcp.Chunk(data, (16 * r,), (32,))}, ckpt)
                except Exception as e:  # reported by the main thread
                    errors.append(e)

            threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
            for t in threads:
                t.start()
            started.wait(60)
            busy = None
            for _ in range(3000):  # until rank 0 is inside dcp_save
                try:
                    ctxs[0].stats()
                except dcp.InvalidError as e:
                    busy = e
                    break
                time.sleep(0.01)
            go.set()
            for t in threads:
                t.join(120)
            self.assertEqual(errors, [])
            self.assertIsNotNone(busy)
            self.assertIn("another thread", str(busy))
            out = np.zeros(32, np.float32)
            c = dcp.Context()
            dcp.load(c, {"w": out}, ckpt)
            self.assertTrue(np.array_equal(out, np.repeat([0.0, 1.0], 16).astype(np.float32)))
            c.close()
            # closing the file collective is collective too: both at once
            closers = [threading.Thread(target=x.close) for x in ctxs]
            for t in closers:
                t.start()
            for t in closers:
                t.join(120)
            self.assertTrue(all(x.closed for x in ctxs))


if __name__ == "__main__":
    unittest.main(verbosity=2)
