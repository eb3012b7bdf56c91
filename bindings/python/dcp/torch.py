"""dcp.torch: torch.distributed.checkpoint's API, written by libdcp.

A drop-in for a trainer that calls ``torch.distributed.checkpoint``::

    import dcp.torch as dcp_torch                 # was: import torch.distributed.checkpoint as dcp
    dcp_torch.save(state_dict, checkpoint_id=path)
    dcp_torch.load(state_dict, checkpoint_id=path)          # in place
    fut = dcp_torch.async_save(state_dict, checkpoint_id=path)

The state_dict follows torch DCP's rules:

* top-level values with ``state_dict()`` / ``load_state_dict()`` (modules,
  optimizers, schedulers, your own objects: the :class:`Stateful`
  protocol) are replaced by their state_dict on save and get
  ``load_state_dict`` called after a load;
* nested dicts are flattened with dotted keys (``"optim.state.fc.weight.
  exp_avg"``), lists too when they hold tensors or containers (their index
  is the key part), exactly as torch DCP's ``flatten_state_dict``;
* tensors (any dtype libdcp has, complex128 stored as its real view,
  non-contiguous ones, CUDA ones staged through pinned host memory,
  ``ShardedTensor`` shards and ``DTensor`` local shards as chunks of the
  global tensor) are libdcp tensors; a load fills them in place and
  reshards across world sizes;
* every other value is a bytes item of tagged JSON (see ``dcp._json``):
  loading runs no code from the checkpoint. What tagged JSON cannot hold is
  refused naming its key, unless ``allow_pickle=True`` (and the load then
  needs ``allow_pickle=True`` too).

The context is ``dcp.Context.from_env()`` (torchrun's variables or the
initialised process group), made once per process, unless ``ctx=`` names
one. :func:`get_state_dict` / :func:`set_state_dict` give model and
optimizer state with optimizer state keyed by parameter fqn.
"""

import atexit
import concurrent.futures
import os
import sys

import torch

from . import _dcp, _env, _json, _torch_compat
from ._dcp import Context  # noqa: F401  (dcp.torch.Context.from_env(), for `import dcp.torch as dcp`)

__all__ = ["save", "load", "async_save", "AsyncSaveFuture", "Stateful", "StateDictOptions",
           "get_state_dict", "set_state_dict", "get_model_state_dict",
           "get_optimizer_state_dict", "set_model_state_dict", "set_optimizer_state_dict",
           "flatten_state_dict", "default_context", "import_torch_dcp", "export_torch_dcp",
           "torch_dtype", "dcp_dtype", "Context"]

_INDEX_KEY = "dcp.torch"  # the checkpoint's kv entry describing the torch side


def _dtype_table():
    pairs = [("float32", _dcp.F32), ("float64", _dcp.F64), ("float16", _dcp.F16),
             ("bfloat16", _dcp.BF16), ("int8", _dcp.I8), ("uint8", _dcp.U8),
             ("int16", _dcp.I16), ("int32", _dcp.I32), ("int64", _dcp.I64),
             ("bool", _dcp.BOOL), ("complex64", _dcp.C64), ("uint16", _dcp.U16),
             ("uint32", _dcp.U32), ("uint64", _dcp.U64), ("float8_e4m3fn", _dcp.F8_E4M3),
             ("float8_e5m2", _dcp.F8_E5M2), ("float8_e8m0fnu", _dcp.F8_E8M0)]
    return {getattr(torch, n): code for n, code in pairs if hasattr(torch, n)}


_TO_DCP = _dtype_table()
_FROM_DCP = {v: k for k, v in _TO_DCP.items()}
# complex dtypes libdcp has no code for: stored as their real view (a last
# dimension of 2), the checkpoint's index remembers the torch dtype
_AS_REAL = {torch.complex128: torch.float64}
if hasattr(torch, "complex32"):
    _AS_REAL[torch.complex32] = torch.float16


def dcp_dtype(dtype):
    """The libdcp dtype code of a torch dtype (InvalidError when none)."""
    code = _TO_DCP.get(dtype)
    if code is None:
        raise _dcp.InvalidError("no libdcp dtype for %s" % dtype)
    return code


def torch_dtype(code):
    """The torch dtype of a libdcp dtype code."""
    try:
        return _FROM_DCP[code]
    except KeyError:
        raise _dcp.InvalidError("no torch dtype for libdcp dtype %s (in this torch)"
                                % _dcp.dtype_name(code)) from None


try:
    from typing import Protocol, runtime_checkable

    @runtime_checkable
    class Stateful(Protocol):
        """What save/load treat as an object with state: state_dict() and
        load_state_dict(state_dict) (modules, optimizers, schedulers, ...)."""

        def state_dict(self): ...

        def load_state_dict(self, state_dict): ...
except ImportError:  # pragma: no cover
    Stateful = object


def _is_stateful(v):
    return (not isinstance(v, (dict, list, tuple)) and not torch.is_tensor(v)
            and callable(getattr(v, "state_dict", None))
            and callable(getattr(v, "load_state_dict", None)))


# ------------------------------------------------------------ flattening --


def _sharded_tensor_type():
    st = sys.modules.get("torch.distributed._shard.sharded_tensor")
    return getattr(st, "ShardedTensor", None) if st is not None else None


def _dtensor_type():
    for name in ("torch.distributed.tensor", "torch.distributed._tensor"):
        mod = sys.modules.get(name)
        if mod is not None and hasattr(mod, "DTensor"):
            return mod.DTensor
    return None


def _is_tensor_like(v):
    """A tensor, ShardedTensor or DTensor (the last two only when their
    modules are loaded: nothing is imported to ask)."""
    if torch.is_tensor(v):
        return True
    st, dt = _sharded_tensor_type(), _dtensor_type()
    return (st is not None and isinstance(v, st)) or (dt is not None and isinstance(v, dt))


def _terminal(v):
    """torch DCP's rule: a dict is never terminal; a list is terminal unless
    it holds a tensor or a non-terminal container; anything else is."""
    if isinstance(v, dict):
        return False
    if not isinstance(v, list):
        return True
    for e in v:
        if _is_tensor_like(e) or (isinstance(e, (dict, list)) and not _terminal(e)):
            return False
    return True


class _Leaf:
    """One flattened value: its key, its path, and where it sits (for a
    load, which writes non-tensor values back)."""
    __slots__ = ("key", "path", "parent", "slot", "value")

    def __init__(self, path, parent, slot, value):
        self.key = ".".join(str(p) for p in path)
        self.path, self.parent, self.slot, self.value = path, parent, slot, value


def _walk(path, parent, slot, value, out):
    if isinstance(value, dict):
        for k, v in value.items():
            _walk(path + (k if isinstance(k, (str, int)) else str(k),), value, k, v, out)
    elif _terminal(value):
        out.append(_Leaf(path, parent, slot, value))
    else:
        for i, v in enumerate(value):
            _walk(path + (i,), value, i, v, out)


def _leaves(state_dict):
    out = []
    for k, v in state_dict.items():
        _walk((str(k),), state_dict, k, v, out)
    seen = set()
    for leaf in out:
        if leaf.key in seen:
            raise _dcp.InvalidError("state_dict: two values flatten to the key '%s'" % leaf.key)
        seen.add(leaf.key)
    return out


def flatten_state_dict(state_dict):
    """{dotted key: value} as torch DCP flattens (Stateful values are not
    expanded here: see save)."""
    return {leaf.key: leaf.value for leaf in _leaves(state_dict)}


def _expand(state_dict, for_load=False):
    """state_dict with top-level Stateful objects replaced by their
    state_dict(), and {key: object} of those. For a load, an optimizer
    with no state yet gets it created first, so that its state_dict names
    the tensors to fill."""
    out, objs = {}, {}
    for k, v in state_dict.items():
        if for_load and isinstance(v, torch.optim.Optimizer):
            _init_optim_state(v)
        if _is_stateful(v):
            objs[k] = v
            out[k] = v.state_dict()
        else:
            out[k] = v
    return out, objs


# --------------------------------------------------------------- context --

_default = None


def default_context():
    """The process's context for calls without ctx=: dcp.Context.from_env(),
    made at the first use (closed at exit, after a pending async save)."""
    global _default
    if _default is None or _default.closed:
        _default = _dcp.Context.from_env()
    return _default


@atexit.register
def _close_default():
    if _default is not None and not _default.closed:
        try:
            _default.close()
        except _dcp.Error:  # something still holds it: its deallocation closes it
            pass


def _ctx_of(ctx, process_group, storage_writer=None, planner=None):
    if storage_writer is not None or planner is not None:
        raise _dcp.InvalidError("storage_writer= / storage_reader= / planner= are torch DCP's "
                                "extension points; libdcp writes and plans itself: pass "
                                "checkpoint_id= (and ctx= for a custom context)")
    if process_group is not None:
        dist = sys.modules.get("torch.distributed")
        if dist is None or process_group is not dist.group.WORLD and \
                dist.get_world_size(process_group) != dist.get_world_size():
            raise _dcp.InvalidError("process_group=: only the default group is supported; "
                                    "pass ctx= a dcp.Context of the ranks that save")
    return ctx if ctx is not None else default_context()


def _path_of(checkpoint_id):
    if checkpoint_id is None:
        raise _dcp.InvalidError("checkpoint_id= is required (the checkpoint's directory)")
    return os.fspath(checkpoint_id)


# ---------------------------------------------------------------- saving --


def _host(t, pinned):
    """A CPU copy of CUDA tensor t, made on a side stream into pinned host
    memory (when pinned), waited on before returning."""
    stream = torch.cuda.Stream(device=t.device)
    stream.wait_stream(torch.cuda.current_stream(t.device))
    with torch.cuda.stream(stream):
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=pinned)
        host.copy_(t, non_blocking=True)
    stream.synchronize()
    return host


_NUMPY_DTYPES = {torch.float16, torch.float32, torch.float64, torch.int8, torch.uint8,
                 torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64}
_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _check_strided(t, key):
    """InvalidError naming key unless t is a dense (strided) tensor."""
    if t.layout != torch.strided:
        raise _dcp.InvalidError("'%s': a %s tensor (only dense tensors are saved and loaded: "
                                "call .to_dense() first)" % (key, str(t.layout).replace(
                                    "torch.", "")))


def _may_overlap(t):
    """Whether elements of t may share memory (an expand()ed or as_strided
    view): each dimension's stride, from the smallest, must step past
    everything the smaller ones span. Layouts that interleave without
    overlapping fail this too; they are refused as well."""
    if t.numel() <= 1:
        return False
    extent = 1
    for stride, size in sorted((s, n) for s, n in zip(t.stride(), t.shape) if n > 1):
        if stride < extent:
            return True
        extent += stride * (size - 1)
    return False


def _check_destination(t, key):
    """InvalidError naming key unless t can hold a load's values: dense,
    and no two of its elements in one place."""
    _check_strided(t, key)
    if _may_overlap(t):
        raise _dcp.InvalidError(
            "'%s': the destination's elements overlap in memory (shape %s, strides %s: an "
            "expand()ed or as_strided view), so it cannot hold the checkpoint's values; load "
            "into a tensor of its own" % (key, list(t.shape), list(t.stride())))


def _written(t):
    """t was written through numpy, behind autograd's back: count it as the
    in-place change it is (as copy_ does), so that a graph which saved t
    refuses to backward through stale values. as_strided_ onto itself
    moves no data."""
    t.detach().as_strided_(t.size(), t.stride(), t.storage_offset())


def _buffer(t, key):
    """(numpy view of a C-contiguous CPU tensor, libdcp dtype, keep-alive),
    staging CUDA tensors, copying non-contiguous ones and viewing complex
    dtypes without a code as real."""
    t = t.detach()
    _check_strided(t, key)
    if t.device.type == "cuda":
        t = _host(t, pinned=True)
    elif t.device.type != "cpu":
        raise _dcp.InvalidError("'%s': a tensor on %s (CPU and CUDA are supported)"
                                % (key, t.device))
    t = t.resolve_conj().resolve_neg()  # a lazy conj() / neg view: its values, not its base's
    if t.dtype in _AS_REAL:
        t = torch.view_as_real(t.contiguous())
    if not t.is_contiguous():
        t = t.contiguous()
    code = _TO_DCP.get(t.dtype)
    if code is None:
        raise _dcp.InvalidError("'%s': no libdcp dtype for %s" % (key, t.dtype))
    view = t
    if t.dtype not in _NUMPY_DTYPES:  # bfloat16, float8, ...: the same bytes as integers
        view = t.view(_SAME_SIZE_INT[t.element_size()])
    return view.numpy(), code, t


def _local_chunks(value, key):
    """[(tensor, offset)] of this rank and the global shape of a tensor-like
    value: a plain tensor is one whole chunk."""
    st_type = _sharded_tensor_type()
    if st_type is not None and isinstance(value, st_type):
        chunks = [(s.tensor, tuple(s.metadata.shard_offsets)) for s in value.local_shards()]
        return chunks, tuple(value.size()), value.dtype
    dt_type = _dtensor_type()
    if dt_type is not None and isinstance(value, dt_type):
        return _dtensor_chunks(value, key)
    return [(value, (0,) * value.dim())], tuple(value.shape), value.dtype


def _dtensor_chunks(value, key):
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:
        from torch.distributed._tensor._utils import compute_local_shape_and_global_offset
    if any(p.is_partial() for p in value.placements):
        raise _dcp.InvalidError("'%s': a DTensor with a Partial placement has no values to "
                                "save (reduce it first)" % key)
    _, offset = compute_local_shape_and_global_offset(value.shape, value.device_mesh,
                                                      value.placements)
    return [(value.to_local(), tuple(offset))], tuple(value.shape), value.dtype


def _encode(key, value, allow_pickle):
    try:
        return _json.dumps(value, allow_pickle)
    except TypeError as e:
        raise _dcp.InvalidError("'%s': %s; pass allow_pickle=True to save it pickled (the load "
                                "must opt in too)" % (key, e)) from None


def _build_save(ctx, state_dict, allow_pickle):
    """(State, keep-alive list, kv index) of a state_dict."""
    expanded, _ = _expand(state_dict)
    st = _dcp.State(ctx)
    keep, as_real = [], {}
    for leaf in _leaves(expanded):
        key, v = leaf.key, leaf.value
        if _is_tensor_like(v):
            chunks, shape, dtype = _local_chunks(v, key)
            if dtype in _AS_REAL:
                as_real[key] = str(dtype).replace("torch.", "")
                shape = shape + (2,)
            code = dcp_dtype(_AS_REAL.get(dtype, dtype)) if dtype in _AS_REAL \
                else _TO_DCP.get(dtype)
            if code is None:
                raise _dcp.InvalidError("'%s': no libdcp dtype for %s" % (key, dtype))
            st.add_tensor(key, code, shape)
            for t, offset in chunks:
                buf, _, alive = _buffer(t, key)
                keep.append(alive)
                off = offset + (0,) if dtype in _AS_REAL else offset
                st.add_chunk(key, off, tuple(buf.shape), buf)
        else:
            st.add_bytes(key, _encode(key, v, allow_pickle))
    index = {"version": 1, "as_real": as_real}
    return st, keep, index


def _save_options(options, index):
    kv = dict(options.pop("kv", None) or {})
    if _INDEX_KEY in kv:  # it was replaced by the index, silently
        raise _dcp.InvalidError("kv: the key '%s' is dcp.torch's own (the checkpoint's index)"
                                % _INDEX_KEY)
    kv.setdefault("framework", "torch " + torch.__version__)
    kv[_INDEX_KEY] = _json.dumps(index).decode()
    options["kv"] = kv
    options.setdefault("overwrite", True)
    return options


def _manager_ctx(manager, ctx, checkpoint_id, step):
    if checkpoint_id is not None:
        raise _dcp.InvalidError("pass checkpoint_id= or manager= (with step=), not both")
    if step is None:
        raise _dcp.InvalidError("manager= needs step= (the step to save)")
    if ctx is not None and ctx is not manager._ctx:
        raise _dcp.InvalidError("ctx= differs from the manager's context")
    return manager._ctx


def _manager_save(how, manager, ctx, checkpoint_id, step, state_dict, allow_pickle, options):
    """A save as step `step` of a dcp.CheckpointManager: how is its save
    or save_async (the manager names the directory, so no overwrite)."""
    ctx = _manager_ctx(manager, ctx, checkpoint_id, step)
    st, keep, index = _build_save(ctx, state_dict, allow_pickle)
    opts = _save_options(options, index)
    opts.pop("overwrite")
    how(step, st, **opts)
    del keep


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None,
         process_group=None, ctx=None, allow_pickle=False, manager=None, step=None,
         **options):
    """Save state_dict to the directory checkpoint_id (collective over the
    context's ranks). Like torch DCP, an existing checkpoint there is
    replaced (atomically: overwrite=False refuses instead). With
    manager= (a dcp.CheckpointManager) and step= instead, it is that
    step of the run (latest and retention move). Other options as dcp.save
    (compress, kv, block_size, ...)."""
    if manager is not None:
        _manager_save(manager.save, manager, ctx, checkpoint_id, step, state_dict,
                      allow_pickle, options)
        return
    ctx = _ctx_of(ctx, process_group, storage_writer, planner)
    st, keep, index = _build_save(ctx, state_dict, allow_pickle)
    _dcp.save(ctx, st, _path_of(checkpoint_id), **_save_options(options, index))
    del keep


def _completed():
    """A future that is already done (the staging of a save that staged
    before async_save returned)."""
    f = concurrent.futures.Future()
    f.set_result(None)
    return f


class _Persisted:
    """The persisted completion of an async save, future-like; done() never
    blocks (no thread waits on the handle, so the context stays usable)."""

    def __init__(self, handle):
        self._h = handle
        self._path = handle.path
        self._error = None

    def done(self):
        return self._h is None or self._h.done()

    def _wait(self, timeout):
        """Wait for the save to persist (what the subclass's handle is)."""
        self._h.wait(timeout)

    def _what(self):
        """The save, as a TimeoutError names it."""
        return "the save to %s" % self._path

    def _finish(self, timeout):
        if self._h is None:
            return
        try:
            self._wait(timeout)
        except _dcp.TimedOutError:
            if timeout is not None:
                raise concurrent.futures.TimeoutError(
                    "%s is still persisting" % self._what()) from None
            raise
        except _dcp.Error as e:
            self._error = e
        self._h = None  # finished: the context no longer counts this handle

    def result(self, timeout=None):
        self._finish(timeout)
        if self._error is not None:
            raise self._error
        return None

    def exception(self, timeout=None):
        self._finish(timeout)
        return self._error

    def cancel(self):
        return False

    def cancelled(self):
        return False

    def running(self):
        return not self.done()


class _Staged:
    """The staging completion of a save staged in the background: result()
    is the fence (the tensors may change after it); done() never blocks."""

    def __init__(self, owner):
        self._owner, self._done = owner, False

    def done(self):
        return self._done or self._owner.done()

    def result(self, timeout=None):
        if not self._done:
            h = self._owner._h
            if h is not None:
                h.fence()
            self._done = True
        return None

    def exception(self, timeout=None):
        try:
            self.result(timeout)
        except _dcp.Error as e:
            return e
        return None


class AsyncSaveFuture(_Persisted):
    """What :func:`async_save` returns: a future of the persisted
    checkpoint (result() / done() / exception(), like the
    concurrent.futures.Future torch's async_save returns), with
    ``staging_completion`` (done when async_save returns, unless it was
    asked for background staging: then its result() is the fence before
    the tensors change; ``with fut:`` and :meth:`fence` do the same),
    ``upload_completion`` (this future), and :meth:`abort`."""

    def __init__(self, handle, background=False):
        super().__init__(handle)
        self.staging_completion = _Staged(self) if background else _completed()
        self.upload_completion = self

    def fence(self):
        """Block until the save is staged (its tensors may change then)."""
        self.staging_completion.result()
        return self

    def __enter__(self):
        return self.fence()

    def __exit__(self, *exc):
        return False

    @property
    def path(self):
        return self._path

    def wait(self, timeout=None):
        """result(timeout) under the name dcp.SaveFuture uses."""
        return self.result(timeout)

    def abort(self):
        """Give up on the save if it is still persisting (nothing is
        committed; result() then raises dcp.PeerError)."""
        if self._h is not None:
            self._h.abort()


class _ManagerSave(AsyncSaveFuture):
    """The future of a manager's async save (the manager holds the handle)."""

    def __init__(self, manager, step):
        self._m, self._step, self._path = manager, step, manager.step_path(step)
        self._error, self._h = None, True
        self.staging_completion, self.upload_completion = _completed(), self

    def done(self):
        return self._h is None or self._m.pending_step != self._step

    def _wait(self, timeout):
        self._m.wait(timeout)

    def _what(self):
        return "step %d" % self._step

    def abort(self):
        if self._h is not None:
            self._m.abort()


_background = {}  # id(ctx) -> ctx, for contexts dcp.torch put in background staging


def _set_staging(ctx, background):
    """Put ctx in background staging or back (only when it changes: a change
    waits for a pending save)."""
    was = _background.get(id(ctx)) is ctx
    if was == background:
        return
    if not hasattr(ctx, "set_async_staging"):
        raise _dcp.InvalidError("background_staging=True needs Context.set_async_staging "
                                "(a newer libdcp binding)")
    ctx.set_async_staging(background)
    if background:
        _background[id(ctx)] = ctx
    else:
        _background.pop(id(ctx), None)


def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None,
               process_group=None, ctx=None, allow_pickle=False, manager=None, step=None,
               background_staging=False, **options):
    """Start saving state_dict and return an :class:`AsyncSaveFuture` once
    it is staged (copied): training may change every tensor from then on.
    With background_staging=True it returns before the copy: call
    ``fut.staging_completion.result()`` (or ``fut.fence()``, or ``with fut:``)
    before anything changes the tensors (the optimizer step). The context
    from from_env() has the writers' coordination set; a context of your
    own with world_size > 1 needs ctx.set_async_coordination. manager= and
    step= as :func:`save` (latest and retention move once the future's
    result() returns)."""
    if manager is not None:
        _manager_save(manager.save_async, manager, ctx, checkpoint_id, step, state_dict,
                      allow_pickle, options)
        return _ManagerSave(manager, step)
    ctx = _ctx_of(ctx, process_group, storage_writer, planner)
    _set_staging(ctx, bool(background_staging))
    st, keep, index = _build_save(ctx, state_dict, allow_pickle)
    handle = _dcp.async_save(ctx, st, _path_of(checkpoint_id), **_save_options(options, index))
    del keep, st  # the handle holds the state, which holds the buffers, until staged
    if not background_staging and hasattr(handle, "fence"):
        handle.fence()  # at once for blocking staging; a context left in background: safe
    return AsyncSaveFuture(handle, background=bool(background_staging))


# --------------------------------------------------------------- loading --


def _read_index(raw):
    """The checkpoint's dcp.torch index (its kv entry; {"as_real": {}} when
    there is none), checked: CorruptError for one that is not as save writes
    it."""
    index = {}
    if raw:
        try:
            index = _json.loads(raw.encode())
        except _json.Malformed as e:
            raise _dcp.CorruptError("the checkpoint's '%s' entry is %s" % (_INDEX_KEY, e)) \
                from None
    as_real = index.get("as_real", {}) if isinstance(index, dict) else None
    if not isinstance(as_real, dict) or not all(
            isinstance(v, str) and v in ("complex128", "complex32") for v in as_real.values()):
        raise _dcp.CorruptError("the checkpoint's '%s' entry is not as dcp.torch writes it: %r"
                                % (_INDEX_KEY, raw))
    return dict(index, as_real=as_real)


def _key_mapper(key_map, key_prefix):
    if key_map is not None and key_prefix:
        raise _dcp.InvalidError("load: pass key_map= or key_prefix=, not both")
    if key_prefix:
        return lambda k: key_prefix + k
    if key_map is None:
        return lambda k: k
    if callable(key_map):
        return key_map
    if isinstance(key_map, dict):
        return lambda k: key_map.get(k, k)
    raise _dcp.InvalidError("load: key_map= is a dict or a function of the key")


class _TensorDest:
    """One tensor to load: where libdcp writes, and what to copy afterwards."""

    def __init__(self, leaf, name, saved, index, cast):
        self.leaf, self.name, self.copies = leaf, name, []
        value, key = leaf.value, leaf.key
        chunks, shape, dtype = _local_chunks(value, key)
        saved_shape = tuple(saved["shape"])
        as_real = index["as_real"].get(name)
        saved_torch = _json._torch_dtype(as_real) if as_real else torch_dtype(saved["dtype"])
        if as_real:
            saved_shape = saved_shape[:-1]
        if saved_shape != shape:
            raise _dcp.MismatchError("'%s': the checkpoint's '%s' has shape %s, the state_dict's "
                                     "tensor %s" % (key, name, list(saved_shape), list(shape)))
        if saved_torch != dtype and not cast:
            raise _dcp.MismatchError("'%s': the checkpoint holds %s, the state_dict's tensor is "
                                     "%s: pass cast=True to convert on load"
                                     % (key, str(saved_torch).replace("torch.", ""),
                                        str(dtype).replace("torch.", "")))
        self.code, self.shape = saved["dtype"], tuple(saved["shape"])
        self.parts = []  # (numpy buffer, offset)
        self.direct = []  # tensors libdcp writes into themselves
        for t, _ in chunks:  # every destination checked before anything is written
            _check_destination(t, key)
        for t, offset in chunks:
            if t.device.type == "cpu" and t.dtype == saved_torch and t.is_contiguous() \
                    and not t.is_conj() and not t.is_neg():
                dest = t.detach()
                self.direct.append(t)
            else:
                pin = t.device.type == "cuda"
                dest = torch.empty(t.shape, dtype=saved_torch, pin_memory=pin)
                self.copies.append((t, dest))
            if as_real:
                dest = torch.view_as_real(dest)
                offset = tuple(offset) + (0,)
            buf, _, _ = _buffer(dest, key)
            self.parts.append((buf, tuple(offset)))

    def add_to(self, st):
        st.add_tensor(self.name, self.code, self.shape)
        for buf, offset in self.parts:
            st.add_chunk(self.name, offset, tuple(buf.shape), buf)

    def finish(self):
        with torch.no_grad():
            for t, dest in self.copies:
                t.copy_(dest.to(t.device, non_blocking=False))
        for t in self.direct:
            _written(t)


def _set_leaf(leaf, value):
    leaf.parent[leaf.slot] = value


def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None,
         process_group=None, ctx=None, allow_pickle=False, cast=False, strict=True,
         key_map=None, key_prefix=None, manager=None, step=None, **options):
    """Load checkpoint_id into state_dict in place (collective): tensors are
    filled (resharded as needed), other values replaced, Stateful objects
    get load_state_dict. cast=True converts dtypes (an fp32 checkpoint into
    a bf16 model); strict=False skips keys the checkpoint lacks; key_prefix
    / key_map map the state_dict's flattened keys to the checkpoint's (a
    safetensors import: key_prefix="model."). allow_pickle=True lets values
    saved with allow_pickle=True be unpickled. With manager= (a
    dcp.CheckpointManager): step= loads that step, no step the newest
    loadable one (manager.resume()); returns the step loaded, or None when
    the run has none (state_dict untouched). Options as dcp.load."""
    if manager is not None:
        if checkpoint_id is not None:
            raise _dcp.InvalidError("pass checkpoint_id= or manager=, not both")
        if ctx is not None and ctx is not manager._ctx:
            raise _dcp.InvalidError("ctx= differs from the manager's context")
        if step is None:
            step = manager.resume()
            if step is None:
                return None
        _load(state_dict, manager._ctx, manager.step_path(step), allow_pickle, cast, strict,
              _key_mapper(key_map, key_prefix),
              lambda st: manager.load(step, st, **options))
        return step
    ctx = _ctx_of(ctx, process_group, storage_reader, planner)
    _load(state_dict, ctx, _path_of(checkpoint_id), allow_pickle, cast, strict,
          _key_mapper(key_map, key_prefix), None, **options)


def _plan_load(state_dict, ctx, path, cast, strict, mapper):
    """(expanded state_dict, its Stateful objects, the State to load,
    tensor destinations, (leaf, buffer) of the other values): everything a
    load checks before the collective libdcp load."""
    expanded, objs = _expand(state_dict, for_load=True)
    meta = _dcp.meta_open(ctx, path)
    try:
        saved = {t["fqn"]: t for t in meta.tensors()}
        lengths = {}
        for b in meta.bytes_items():
            if b["rank"] in (-1, ctx.rank):
                lengths.setdefault(b["key"], b["length"])
        raw_index = meta.kv().get(_INDEX_KEY)
    finally:
        del meta
    index = _read_index(raw_index)
    st = _dcp.State(ctx)
    tensors, objects = [], []
    for leaf in _leaves(expanded):
        name = mapper(leaf.key)
        if _is_tensor_like(leaf.value):
            if name not in saved:
                if strict:
                    raise _dcp.NotFoundError("'%s' is not in the checkpoint%s" % (
                        leaf.key, "" if name == leaf.key else " (as '%s')" % name))
                continue
            d = _TensorDest(leaf, name, saved[name], index, cast)
            d.add_to(st)
            tensors.append(d)
        else:
            if name not in lengths:
                if strict:
                    raise _dcp.NotFoundError("'%s' is not in the checkpoint%s" % (
                        leaf.key, "" if name == leaf.key else " (as '%s')" % name))
                continue
            buf = bytearray(lengths[name])
            st.add_bytes(name, buf)
            objects.append((leaf, buf))
    return expanded, objs, st, tensors, objects


def _load(state_dict, ctx, path, allow_pickle, cast, strict, mapper, run, **options):
    """load's body; run(state) performs the libdcp load when given."""
    def collective(st):
        if run is not None:
            run(st)
        else:
            _dcp.load(ctx, st, path, **options)

    try:
        expanded, objs, st, tensors, objects = _plan_load(state_dict, ctx, path, cast, strict,
                                                          mapper)
    except Exception:
        # the other ranks may be in the collective load already: take part
        # with nothing to load, then raise, rather than leave them waiting
        # for this rank until the context's timeout (or its exit)
        if ctx.world_size > 1:
            try:
                collective(_dcp.State(ctx))
            except _dcp.Error:
                pass
        raise
    collective(st)
    del st
    for d in tensors:
        d.finish()
    for leaf, buf in objects:
        try:
            value = _json.loads(buf, allow_pickle)
        except _json.PickleRefused:
            raise _dcp.InvalidError("'%s' was saved pickled (allow_pickle=True): pass "
                                    "allow_pickle=True to load it (unpickling runs code from "
                                    "the checkpoint)" % leaf.key) from None
        except _json.Malformed as e:
            raise _dcp.CorruptError("'%s': the checkpoint's value is %s" % (leaf.key, e)) \
                from None
        try:
            value = _json.resolve(value, leaf.value, leaf.key)
        except ValueError as e:
            raise _dcp.MismatchError(str(e)) from None
        _set_leaf(leaf, value)
    for k, obj in objs.items():
        obj.load_state_dict(expanded[k])
    for k, v in expanded.items():
        if k not in objs:
            state_dict[k] = v


# ----------------------------------------- model and optimizer state dicts --


class StateDictOptions:
    """Options of get_state_dict / set_state_dict (torch's names):
    full_state_dict (gather FSDP shards into whole tensors), cpu_offload,
    strict (set_*: every key must match), ignore_frozen_params."""

    def __init__(self, full_state_dict=False, cpu_offload=False, strict=True,
                 ignore_frozen_params=False):
        self.full_state_dict, self.cpu_offload = full_state_dict, cpu_offload
        self.strict, self.ignore_frozen_params = strict, ignore_frozen_params


def _unwrap(model):
    while isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        model = model.module
    return model


def _is_fsdp(model):
    mod = sys.modules.get("torch.distributed.fsdp")
    return mod is not None and isinstance(model, mod.FullyShardedDataParallel)


def _clean_fqn(name):
    for part in ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod."):
        name = name.replace(part, "")
    return name


def _param_names(model):
    """{id(param): fqn} with wrapper prefixes removed."""
    return {id(p): _clean_fqn(n) for n, p in _unwrap(model).named_parameters()}


def _fsdp_state_dict_type(m, opts):
    """FSDP's state_dict_type context for the FSDP model m: the full
    state_dict with options.full_state_dict, else the sharded one."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
    kind = StateDictType.FULL_STATE_DICT if opts.full_state_dict \
        else StateDictType.SHARDED_STATE_DICT
    return FSDP.state_dict_type(m, kind)


def get_model_state_dict(model, *, options=None):
    """The model's state_dict with clean fqns (no DDP "module." prefix); an
    FSDP model's is its SHARDED_STATE_DICT (ShardedTensors), or the full one
    with options.full_state_dict."""
    opts = options or StateDictOptions()
    m = _unwrap(model)
    if _is_fsdp(m):
        with _fsdp_state_dict_type(m, opts):
            sd = m.state_dict()
    else:
        sd = m.state_dict()
    out = {_clean_fqn(k): v for k, v in sd.items()}
    if opts.ignore_frozen_params:
        frozen = {_clean_fqn(n) for n, p in m.named_parameters() if not p.requires_grad}
        out = {k: v for k, v in out.items() if k not in frozen}
    if opts.cpu_offload:
        out = {k: v.cpu() if torch.is_tensor(v) else v for k, v in out.items()}
    return out


def _init_optim_state(optim):
    """Create an empty optimizer's state (a step with zero gradients and a
    learning rate of 0), so that a load can fill its tensors in place; the
    parameters do not change and their gradients are put back."""
    if optim.state:
        return
    params = [p for g in optim.param_groups for p in g["params"] if p.requires_grad]
    grads = [p.grad for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
    lrs = [g["lr"] for g in optim.param_groups]
    for g in optim.param_groups:
        g["lr"] = 0.0 if not torch.is_tensor(g["lr"]) else torch.zeros_like(g["lr"])
    try:
        optim.step()
    except Exception as e:  # LBFGS wants a closure, SparseAdam sparse gradients, ...
        raise _dcp.InvalidError(
            "%s has no state yet and a step with zero gradients failed (%s): take one real "
            "step before loading into it, or load its state_dict yourself"
            % (type(optim).__name__, e)) from None
    finally:
        for g, lr in zip(optim.param_groups, lrs):
            g["lr"] = lr
        for p, g in zip(params, grads):
            p.grad = g


def _optimizers(optimizers):
    if optimizers is None:
        return []
    if isinstance(optimizers, torch.optim.Optimizer):
        return [optimizers]
    return list(optimizers)


def get_optimizer_state_dict(model, optimizers, *, options=None):
    """The optimizers' state as one dict, keyed by parameter fqn:
    {"state": {fqn: {exp_avg: ..., step: ...}}, "param_groups": [{...,
    "params": [fqn, ...]}]} (the groups of every optimizer, in order). An
    optimizer with no state yet gets it created first (see
    _init_optim_state), so a load fills it in place."""
    names = _param_names(model)
    state, groups = {}, []
    for opt in _optimizers(optimizers):
        _init_optim_state(opt)
        sd = opt.state_dict()
        params = [p for g in opt.param_groups for p in g["params"]]
        fqns = [names.get(id(p)) for p in params]
        if None in fqns:
            raise _dcp.InvalidError("get_optimizer_state_dict: an optimizer parameter is not a "
                                    "parameter of the model")
        for idx, st in sd["state"].items():
            state[fqns[idx]] = st
        for g in sd["param_groups"]:
            g2 = dict(g)
            g2["params"] = [fqns[i] for i in g["params"]]
            groups.append(g2)
    return {"state": state, "param_groups": groups}


def get_state_dict(model, optimizers, *, options=None):
    """(model state_dict, optimizer state_dict): get_model_state_dict and
    get_optimizer_state_dict."""
    return (get_model_state_dict(model, options=options),
            get_optimizer_state_dict(model, optimizers, options=options))


def set_model_state_dict(model, model_state_dict, *, options=None):
    """Load a state_dict from get_model_state_dict (after dcp.torch.load
    filled it) into the model; returns load_state_dict's result."""
    opts = options or StateDictOptions()
    m = _unwrap(model)
    if _is_fsdp(m):
        with _fsdp_state_dict_type(m, opts):
            return m.load_state_dict(model_state_dict, strict=opts.strict)
    return m.load_state_dict(model_state_dict, strict=opts.strict)


def set_optimizer_state_dict(model, optimizers, optim_state_dict, *, options=None):
    """Load an optimizer state_dict keyed by fqn into the optimizers (each
    takes the state and groups of its own parameters)."""
    names = _param_names(model)
    groups = list(optim_state_dict["param_groups"])
    state = optim_state_dict["state"]
    for opt in _optimizers(optimizers):
        params = [p for g in opt.param_groups for p in g["params"]]
        fqns = [names.get(id(p)) for p in params]
        index = {f: i for i, f in enumerate(fqns)}
        mine = groups[:len(opt.param_groups)]
        groups = groups[len(opt.param_groups):]
        if [list(g["params"]) for g in mine] != \
                [[names.get(id(p)) for p in g["params"]] for g in opt.param_groups]:
            raise _dcp.MismatchError("set_optimizer_state_dict: the optimizer's parameter groups "
                                     "differ from the state_dict's")
        sd_groups = []
        for g in mine:
            g2 = dict(g)
            g2["params"] = [index[f] for f in g["params"]]
            sd_groups.append(g2)
        sd_state = {index[f]: st for f, st in state.items() if f in index}
        opt.load_state_dict({"state": sd_state, "param_groups": sd_groups})
    if groups:
        raise _dcp.MismatchError("set_optimizer_state_dict: the state_dict has %d parameter "
                                 "groups more than the optimizers" % len(groups))


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    """set_model_state_dict and set_optimizer_state_dict."""
    r = set_model_state_dict(model, model_state_dict, options=options)
    set_optimizer_state_dict(model, optimizers, optim_state_dict, options=options)
    return r


# ---------------------------------------------------------------- interop --


def _torch_dcp():
    return _torch_compat.torch_checkpoint_module()


def import_torch_dcp(src, dst, *, ctx=None, allow_pickle=False, **options):
    """Convert the checkpoint torch's own distributed checkpoint wrote at src
    (read through torch's FileSystemReader) into a libdcp checkpoint at dst,
    on this process alone. torch's reader unpickles the source (its .metadata
    is a pickle, its tensors go through torch.load, its other values are
    pickled objects), which runs code from it: the import needs
    allow_pickle=True, for a source you trust. Non-tensor values are stored
    as tagged JSON where possible."""
    if not allow_pickle:
        raise _dcp.InvalidError(
            "import_torch_dcp: torch's FileSystemReader unpickles %s (its .metadata, tensor "
            "files and values), which runs code from the checkpoint: pass allow_pickle=True "
            "for a checkpoint you trust" % os.fspath(src))
    tcp = _torch_dcp()
    reader = tcp.FileSystemReader(os.fspath(src))
    md = reader.read_metadata()
    sd = {}
    for fqn, m in md.state_dict_metadata.items():
        sd[fqn] = torch.empty(tuple(m.size), dtype=m.properties.dtype) \
            if hasattr(m, "size") else None
    _torch_load_local(tcp, sd, reader)
    own = ctx if ctx is not None else _dcp.Context(world_size=1)
    try:
        save(sd, checkpoint_id=dst, ctx=own, allow_pickle=allow_pickle, **options)
    finally:
        if ctx is None:
            own.close()


def _torch_load_local(tcp, sd, reader):
    if hasattr(tcp, "load") and "no_dist" not in getattr(tcp.load, "__code__").co_varnames:
        tcp.load(sd, storage_reader=reader)  # torch >= 2.2: no process group means local
    else:
        tcp.load_state_dict(sd, reader, no_dist=True)


def export_torch_dcp(src, dst, *, ctx=None, allow_pickle=False):
    """Write the libdcp checkpoint at src as a torch distributed checkpoint
    at dst (torch's FileSystemWriter, this process alone): every tensor
    whole, every other value as torch stores it (pickled by torch)."""
    tcp = _torch_dcp()
    own = ctx if ctx is not None else _dcp.Context(world_size=1)
    try:
        meta = _dcp.meta_open(own, os.fspath(src))
        raw_index = meta.kv().get(_INDEX_KEY)
        index = _read_index(raw_index)
        sd = {}
        for t in meta.tensors():
            name = t["fqn"]
            as_real = index["as_real"].get(name)
            shape = tuple(t["shape"])
            if as_real:
                sd[name] = torch.empty(shape[:-1], dtype=_json._torch_dtype(as_real))
            else:
                sd[name] = torch.empty(shape, dtype=torch_dtype(t["dtype"]))
        for b in meta.bytes_items():
            sd.setdefault(b["key"], None)
        del meta
        load(sd, checkpoint_id=src, ctx=own, allow_pickle=allow_pickle)
    finally:
        if ctx is None:
            own.close()
    writer = tcp.FileSystemWriter(os.fspath(dst))
    if hasattr(tcp, "save") and "no_dist" not in tcp.save.__code__.co_varnames:
        tcp.save(sd, storage_writer=writer)
    else:
        tcp.save_state_dict(sd, writer, no_dist=True)
