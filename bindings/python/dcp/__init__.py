"""libdcp from Python: distributed checkpoints with resharding and async save.

The extension ``dcp._dcp`` wraps ``include/dcp.h`` one call at a time
(:class:`Context`, :class:`Layout`, :class:`State`, :class:`Meta`,
``meta_open``, ``verify``, ...). This module adds the convenient layer:
:func:`save`, :func:`load` and :func:`async_save` (which returns a
:class:`SaveFuture`) take either a :class:`State` or a dict of name -> item
(numpy arrays or any C-contiguous buffer, :class:`Chunk`, :class:`Sharded`,
:class:`Flat`, bytes items); the thin functions stay reachable as
``dcp._dcp.save`` and so on.

Every libdcp failure raises a subclass of :class:`Error` carrying ``status``
(the negative dcp_status), ``code`` (``"DCP_ENOTFOUND"``) and ``message``
(the library's text). ``dcp.pytorch`` is the PyTorch adapter.
"""

from . import _dcp
from ._dcp import *  # noqa: F401,F403  (types, errors, constants, functions)
from ._dcp import (Context, Layout, State, Error, InvalidError, NotFoundError,
                   MismatchError, IncompleteError, CorruptError, meta_open, dtype_size,
                   BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, F32, F64, C64,
                   SCOPE_REPLICATED)

__all__ = [n for n in dir(_dcp) if not n.startswith("_")] + [
    "Chunk", "Sharded", "FlatSharded", "Flat", "Bytes", "SaveFuture", "dtype_of", "build_state",
    "committed"]



def _error_init(self, *args):
    """dcp.Error raised from Python carries .message like the C layer's
    (.status and .code come from the class)."""
    Exception.__init__(self, *args)
    self.message = str(args[0]) if args else ""


Error.__init__ = _error_init

# buffer-protocol format characters (struct module) -> dcp dtype
_FORMATS = {"?": BOOL, "b": I8, "B": U8, "h": I16, "H": U16, "i": I32, "I": U32,
            "l": I64, "L": U64, "q": I64, "Q": U64, "e": F16, "f": F32, "d": F64, "Zf": C64}


def dtype_of(data):
    """The dcp dtype of a buffer, from its format (numpy arrays, array.array,
    memoryviews). Raises InvalidError when the format has no dcp dtype (e.g.
    bfloat16 has no buffer format: pass dtype=dcp.BF16 explicitly)."""
    fmt = memoryview(data).format.lstrip("@=<")
    if fmt in ("l", "L") and memoryview(data).itemsize != 8:
        fmt = fmt.replace("l", "i").replace("L", "I")
    try:
        return _FORMATS[fmt]
    except KeyError:
        raise InvalidError("no dcp dtype for buffer format %r: pass dtype=" % fmt) from None


def _shape_of(data):
    return tuple(memoryview(data).shape)


class Chunk:
    """A chunk of a tensor: ``data`` holds the box [offset, offset+shape(data))
    of a tensor whose global shape is ``global_shape``. Several Chunk of one
    name may be given as a list."""

    def __init__(self, data, offset, global_shape, dtype=None):
        self.data, self.offset, self.global_shape, self.dtype = data, tuple(offset), \
            tuple(global_shape), dtype


class Sharded:
    """This rank's shard of a tensor of ``global_shape`` spread as ``layout``
    (a :class:`Layout`) says; ``data`` holds exactly that rank's box."""

    def __init__(self, data, global_shape, layout, dtype=None):
        self.data, self.global_shape, self.layout, self.dtype = data, tuple(global_shape), \
            layout, dtype


class FlatSharded:
    """This rank's flat shard (ZeRO / FSDP) of a tensor of ``global_shape``:
    the cell ``layout`` gives the rank, flattened and cut over the mesh dims in
    ``flat_dims`` (a bit mask; 0: every mesh dim that shards nothing);
    ``data`` holds exactly the elements ``layout.flat_range(global_shape,
    rank, flat_dims)`` names. A save of layout items only plans per rank."""

    def __init__(self, data, global_shape, layout, flat_dims=0, dtype=None):
        self.data, self.global_shape, self.layout, self.flat_dims, self.dtype = \
            data, tuple(global_shape), layout, int(flat_dims), dtype


class Flat:
    """Elements [begin, begin+len(data)) of the row-major region (offset, size)
    of a tensor of ``global_shape`` (the whole tensor when region is None):
    FSDP / ZeRO flat shards."""

    def __init__(self, data, begin, global_shape, region=None, dtype=None):
        self.data, self.begin, self.global_shape, self.region, self.dtype = \
            data, int(begin), tuple(global_shape), region, dtype


class Bytes:
    """A bytes item. ``data`` is any buffer (writable for a load), or None on
    a load to get the saved bytes back (the length comes from the
    checkpoint's metadata). ``scope`` is SCOPE_REPLICATED or SCOPE_PER_RANK."""

    def __init__(self, data=None, scope=SCOPE_REPLICATED):
        self.data, self.scope = data, scope


def _add_tensor_item(st, name, item):
    """Add one tensor item (a plain buffer, Chunk(s), Sharded, FlatSharded or Flat)."""
    if isinstance(item, Sharded):
        dt = item.dtype if item.dtype is not None else dtype_of(item.data)
        st.add_sharded(name, dt, item.global_shape, item.layout, item.data)
        return
    if isinstance(item, FlatSharded):
        dt = item.dtype if item.dtype is not None else dtype_of(item.data)
        st.add_flat_sharded(name, dt, item.global_shape, item.layout, item.data,
                            item.flat_dims)
        return
    if isinstance(item, Flat):
        dt = item.dtype if item.dtype is not None else dtype_of(item.data)
        st.add_tensor(name, dt, item.global_shape)
        st.add_flat(name, item.begin, memoryview(item.data).nbytes // dtype_size(dt),
                    item.data, item.region)
        return
    chunks = item if isinstance(item, (list, tuple)) else [item]
    if not chunks:
        raise InvalidError("tensor '%s': an empty list of chunks" % name)
    if not all(isinstance(c, Chunk) for c in chunks):
        if len(chunks) != 1:
            raise InvalidError("tensor '%s': a list must hold dcp.Chunk objects" % name)
        data = chunks[0]
        chunks = [Chunk(data, (0,) * len(_shape_of(data)), _shape_of(data))]
    first = chunks[0]
    dt = first.dtype if first.dtype is not None else dtype_of(first.data)
    st.add_tensor(name, dt, first.global_shape)
    for c in chunks:
        if c.global_shape != first.global_shape:
            raise MismatchError("tensor '%s': chunks disagree on the global shape" % name)
        st.add_chunk(name, c.offset, _shape_of(c.data) or (), c.data)


def _is_bytes_item(item):
    return isinstance(item, (Bytes, bytes, bytearray))


def build_state(ctx, items, meta=None):
    """A :class:`State` of ctx holding ``items`` (a dict name -> item).

    An item is a buffer (a whole tensor: numpy array, memoryview, ...), a
    :class:`Chunk` or list of them, :class:`Sharded`, :class:`Flat`, or a
    bytes item (``bytes``/``bytearray`` are replicated bytes items;
    :class:`Bytes` gives the scope). ``Bytes(None)`` needs ``meta`` (a
    :class:`Meta` of the checkpoint to load): a bytearray of the saved
    length is allocated. Returns (state, {name: bytearray allocated})."""
    st = State(ctx)
    allocated = {}
    for name, item in items.items():
        if not _is_bytes_item(item):
            _add_tensor_item(st, name, item)
            continue
        scope = item.scope if isinstance(item, Bytes) else SCOPE_REPLICATED
        data = item.data if isinstance(item, Bytes) else item
        if data is None:
            if meta is None:
                raise InvalidError("bytes '%s': no buffer and no metadata to size one" % name)
            data = allocated[name] = bytearray(_bytes_length(meta, name, ctx.rank))
        st.add_bytes(name, data, scope)
    return st, allocated


def _bytes_length(meta, key, rank):
    """The saved length of bytes item key: the replicated copy, else this rank's."""
    found = [b for b in meta.bytes_items() if b["key"] == key and b["rank"] in (-1, rank)]
    if not found:
        raise NotFoundError("bytes '%s' is not in the checkpoint (for rank %d)" % (key, rank))
    return found[0]["length"]


def save(ctx, items, path, **options):
    """Save ``items`` to ``path``: collective over ctx's ranks. ``items`` is a
    :class:`State` or a dict (see :func:`build_state`). Options: overwrite,
    compress, flags, block_size, zstd_level, policy, kv (dict of str), save_id
    (an uncoordinated save's identity: the same on every rank, e.g. the step),
    check_replicas (compare every rank's copy of each replicated box first:
    :class:`ReplicaError` on a mismatch, nothing written; see
    ``Context.check_replicas``)."""
    st = items if isinstance(items, State) else build_state(ctx, items)[0]
    _dcp.save(ctx, st, path, **options)


def load(ctx, items, path, meta=None, **options):
    """Load ``path`` into the buffers of ``items`` (a :class:`State` or a
    dict), resharding as needed: collective. ``Bytes(None)`` items are
    allocated from the metadata (opened here unless ``meta`` is given).
    Options: flags, read_dedup, reader_policy, max_inflight_bytes. Returns
    {name: bytearray} of the allocated bytes items."""
    if isinstance(items, State):
        _dcp.load(ctx, items, path, **options)
        return {}
    if meta is None and any(isinstance(i, Bytes) and i.data is None for i in items.values()):
        meta = meta_open(ctx, path)
    st, allocated = build_state(ctx, items, meta)
    del meta
    _dcp.load(ctx, st, path, **options)
    return allocated


class SaveFuture:
    """An async save in flight. It exists once the state is **staged** (the
    buffers may change); :meth:`done` says whether it has finished,
    :attr:`persisted` whether it committed; :meth:`wait` blocks and raises
    the save's error."""

    def __init__(self, handle):
        self._h = handle

    staged = True

    @property
    def path(self):
        return self._h.path

    def done(self):
        """Whether the save has finished (persisted or failed); never blocks."""
        return self._h.done()

    def wait(self, timeout=None):
        """Block until persisted; raise the dcp.Error of a failed save. With
        a timeout (seconds), raise dcp.TimedOutError if the save is still
        persisting by then (it goes on; wait again, or abort)."""
        self._h.wait(timeout)

    result = wait

    def abort(self):
        """Give up on the save if it is still persisting: the writer process
        is killed and nothing is committed (wait then raises dcp.PeerError).
        A no-op once it has finished."""
        self._h.abort()

    @property
    def persisted(self):
        """True once the checkpoint is committed (False while running or failed)."""
        return self._h.done() and self.exception() is None

    def exception(self):
        """Block until finished; the dcp.Error of a failed save, or None."""
        try:
            self._h.wait()
        except Error as e:
            return e
        return None


def async_save(ctx, items, path, **options):
    """Start an async save of ``items`` (a :class:`State` or a dict) to
    ``path`` and return a :class:`SaveFuture` once staged: the buffers may
    change from then on. Needs ctx.set_async_coordination(...) with more
    than one rank. Options as :func:`save`. On a context in background
    staging (``ctx.set_async_staging(True)``) it waits for the copy before
    returning, so that ``staged`` holds; ``dcp._dcp.async_save`` returns
    before it (its handle's ``fence()`` is the wait)."""
    st = items if isinstance(items, State) else build_state(ctx, items)[0]
    return SaveFuture(_dcp.async_save(ctx, st, path, **options).fence())


def committed(ctx, path):
    """Whether a committed checkpoint is at path (its .metadata opens)."""
    try:
        meta_open(ctx, path)
    except (NotFoundError, IncompleteError, CorruptError):
        return False
    return True


# the checkpoint manager (steps, latest, retention, resume): dcp/manager.py
from .manager import CheckpointManager, StepInfo  # noqa: E402

__all__ += ["CheckpointManager", "StepInfo"]
