"""PyTorch adapter: a training state as libdcp items and back.

A training state is a model (a ``torch.nn.Module``, DDP-wrapped or not, or
a dict of them by name), an optimizer (or a list of them), an LR scheduler
(or a list), the RNG states and a dict of user extras. :func:`flatten`
turns it into items (see :func:`dcp.build_state`):

===========================  =============================================
``model.<fqn>``              every tensor of the model's state_dict (a dict
                             of models: ``model.<name>.<fqn>``); non-tensor
                             entries (``get_extra_state``) are bytes items of
                             tagged JSON; the prefix is ``model_prefix=``
``optim.state.<fqn>.<key>``  every tensor of the optimizer state (exp_avg,
                             step, ...), named by its parameter's fqn (a
                             list of optimizers: ``optim.<i>.state...``)
``optim.meta``               bytes: param_groups (params as fqns) and the
                             non-tensor optimizer state, tagged JSON
``sched``                    bytes: the scheduler's state_dict, tagged JSON
                             (functions in it, OneCycleLR's ``anneal_func``,
                             by name; a list: ``sched.<i>``)
``rng.torch``, ``rng.numpy``, per-rank bytes: the CPU generator state,
``rng.python``               numpy's and Python's global RNG states
``extra``                    bytes: the user's dict, tagged JSON
===========================  =============================================

Sharded tensors (tensor parallelism, hand-sharded modules) are described
by :class:`Shard`: a global shape and either a :class:`dcp.Layout` or the
offset of this rank's box. A module may describe its own tensors with a
method ``dcp_shards()`` returning {local name: Shard}; ``shards=`` adds or
overrides entries by fqn. Optimizer state tensors with their parameter's
shape are sharded like the parameter. Tensors without a Shard are whole
(replicated: DDP).

:func:`load` fills the model's tensors in place (their memory is the
destination), loads the optimizer state into its existing tensors when it
has them (else into new ones handed to ``optimizer.load_state_dict``),
restores the scheduler and RNG states, and returns the extras. A different
world size or sharding at load time is fine (resharding happens in
libdcp); per-rank RNG states then cannot be restored: pass ``rng=False``.
JSON (not pickle) keeps a checkpoint from running code when loaded; the
extras may hold tensors, tuples, numpy arrays (see ``dcp._json``).
Non-contiguous tensors are saved from a contiguous copy and loaded through
one; CUDA tensors are staged through pinned host memory (a side stream,
waited on) and loaded back to their device; complex128 is stored as its float64 real view (a last dimension of 2);
``cast=True`` on load converts dtypes (an fp32 checkpoint into a bf16
model). ``dcp.torch`` is the torch.distributed.checkpoint-style API.
"""

import os
import random

import numpy as np
import torch

import dcp
from . import _json
from . import torch as _dcp_torch  # the load-destination checks and CUDA staging

__all__ = ["Shard", "buffer_of", "flatten", "save", "async_save", "load",
           "latest_checkpoint", "torch_dtype"]

_TO_DCP = {torch.float32: dcp.F32, torch.float64: dcp.F64, torch.float16: dcp.F16,
           torch.bfloat16: dcp.BF16, torch.int8: dcp.I8, torch.uint8: dcp.U8,
           torch.int16: dcp.I16, torch.int32: dcp.I32, torch.int64: dcp.I64,
           torch.bool: dcp.BOOL, torch.complex64: dcp.C64}
_FROM_DCP = {v: k for k, v in _TO_DCP.items()}
_AS_REAL = {torch.complex128: torch.float64}  # no libdcp code: stored as the real view


class Shard:
    """This rank's tensor is a box of a global tensor of ``global_shape``:
    the box ``layout`` (a :class:`dcp.Layout`) gives this rank, or the box
    at ``offset`` with the tensor's own shape."""

    def __init__(self, global_shape, layout=None, offset=None):
        if (layout is None) == (offset is None):
            raise dcp.InvalidError("Shard needs exactly one of layout and offset")
        self.global_shape = tuple(int(x) for x in global_shape)
        self.layout = layout
        self.offset = None if offset is None else tuple(int(x) for x in offset)

    def local_shape(self, rank):
        """The shape of rank's box."""
        if self.layout is None:
            raise dcp.InvalidError("the local shape of an offset Shard is the tensor's own")
        return self.layout.box(self.global_shape, rank)[1]


def torch_dtype(code):
    """The torch dtype of a dcp dtype code."""
    try:
        return _FROM_DCP[code]
    except KeyError:
        raise dcp.InvalidError("no torch dtype for dcp dtype %s" % dcp.dtype_name(code)) from None


def buffer_of(t):
    """(a numpy array sharing t's memory, its dcp dtype) for a contiguous CPU
    tensor; bfloat16 is viewed as int16 (numpy has no bfloat16)."""
    if t.device.type != "cpu":
        raise dcp.InvalidError("tensor on %s: only CPU tensors have host buffers" % t.device)
    if not t.is_contiguous():
        raise dcp.InvalidError("tensor is not contiguous")
    code = _TO_DCP.get(t.dtype)
    if code is None:
        raise dcp.InvalidError("no dcp dtype for %s" % t.dtype)
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy(), code


def _item(t, spec, name):
    """The dcp item of tensor t (the item name): whole, or the box spec
    says. A non-contiguous t is copied (a save; a load goes through
    _LoadDest), so is a lazily conjugated or negated one; complex128 is its
    real view with a last dimension of 2."""
    real = t.dtype in _AS_REAL
    t = t.detach()
    _dcp_torch._check_strided(t, name)
    t = t.resolve_conj().resolve_neg()
    if t.device.type == "cuda":  # staged: a pinned host copy on a side stream
        t = _dcp_torch._host(t, pinned=True)
    if not t.is_contiguous():
        t = t.contiguous()
    if real:
        t = torch.view_as_real(t)
    buf, code = buffer_of(t)
    extra = (2,) if real else ()
    if spec is None:
        item = dcp.Chunk(buf, (0,) * t.dim(), tuple(t.shape), code)
    elif spec.layout is not None:
        if real:
            raise dcp.InvalidError("a complex128 tensor sharded by a Layout: describe it "
                                   "with Shard(offset=) instead")
        item = dcp.Sharded(buf, spec.global_shape, spec.layout, code)
    else:
        item = dcp.Chunk(buf, spec.offset + (0,) * len(extra), spec.global_shape + extra, code)
    item.tensor = torch.view_as_complex(t) if real else t
    item.complex128 = real
    return item


def _models(model):
    """[(fqn prefix, module)]: one model (DDP unwrapped) or a dict by name."""
    if model is None:
        return []
    if isinstance(model, dict):
        return [(str(k) + ".", _unwrap(m)) for k, m in model.items()]
    return [("", _unwrap(model))]


def _optimizers(optimizer):
    """[(item prefix, optimizer)]: "optim." for one, "optim.<i>." for a list."""
    if optimizer is None:
        return []
    if isinstance(optimizer, (list, tuple)):
        return [("optim.%d." % i, o) for i, o in enumerate(optimizer)]
    return [("optim.", optimizer)]


def _schedulers(scheduler):
    if scheduler is None:
        return []
    if isinstance(scheduler, (list, tuple)):
        return [("sched.%d" % i, s) for i, s in enumerate(scheduler)]
    return [("sched", scheduler)]


def _unwrap(model):
    """The module inside DDP / DataParallel wrappers."""
    while isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        model = model.module
    return model


def _shards(model, extra):
    """Shard specs by fqn: the modules' own dcp_shards(), then extra's."""
    out = {}
    for prefix, top in _models(model):
        for mname, m in top.named_modules():
            fn = getattr(m, "dcp_shards", None)
            if callable(fn):
                for k, spec in fn().items():
                    out[prefix + (mname + "." + k if mname else k)] = spec
    out.update(extra or {})
    return out


def _param_fqns(model, optimizer):
    """The fqn of each optimizer parameter, in state_dict index order."""
    names = {}
    for prefix, m in _models(model):
        names.update({id(p): prefix + n for n, p in m.named_parameters()})
    params = [p for g in optimizer.param_groups for p in g["params"]]
    return params, [names.get(id(p), "param%d" % i) for i, p in enumerate(params)]


def _optim_meta(optimizer, fqns):
    """param_groups with fqns for params, and the non-tensor per-param state."""
    sd = optimizer.state_dict()
    groups = []
    for g in sd["param_groups"]:
        g2 = {k: v for k, v in g.items() if k != "params"}
        g2["params"] = [fqns[i] for i in g["params"]]
        groups.append(g2)
    other = {}
    for idx, st in sd["state"].items():
        for key, v in st.items():
            if not torch.is_tensor(v):
                other.setdefault(fqns[idx], {})[key] = v
    return sd, {"param_groups": groups, "other": other}


def _optim_items(optimizer, model, shards, items, prefix="optim."):
    params, fqns = _param_fqns(model, optimizer)
    sd, meta = _optim_meta(optimizer, fqns)
    for idx, st in sd["state"].items():
        for key, v in st.items():
            if not torch.is_tensor(v):
                continue
            if "." in key:
                raise dcp.InvalidError("optimizer state key %r contains '.'" % key)
            spec = shards.get(fqns[idx]) if v.shape == params[idx].shape else None
            name = "%sstate.%s.%s" % (prefix, fqns[idx], key)
            items[name] = _item(v, spec, name)
    items[prefix + "meta"] = dcp.Bytes(_json.dumps(meta))


def _rng_items(items):
    per_rank = dcp.SCOPE_PER_RANK
    items["rng.torch"] = dcp.Bytes(torch.get_rng_state().numpy(), per_rank)
    items["rng.numpy"] = dcp.Bytes(_json.dumps(np.random.get_state()), per_rank)
    items["rng.python"] = dcp.Bytes(_json.dumps(random.getstate()), per_rank)


def _model_entries(model):
    """[(fqn, value)] of the model state_dict(s): tensors and extra states."""
    out = []
    for prefix, m in _models(model):
        out.extend((prefix + name, v) for name, v in m.state_dict().items())
    return out


def flatten(model=None, optimizer=None, scheduler=None, rng=True, extra=None, shards=None,
            model_prefix="model."):
    """The items of a training state (see the module's docstring), ready for
    dcp.save / dcp.async_save. The tensors' memory is referenced, not copied
    (a non-contiguous tensor's is copied)."""
    specs = _shards(model, shards)
    items = {}
    for name, t in _model_entries(model):
        if torch.is_tensor(t):
            items[model_prefix + name] = _item(t, specs.get(name), model_prefix + name)
        else:  # get_extra_state
            items[model_prefix + name] = dcp.Bytes(_dumps(model_prefix + name, t))
    for prefix, opt in _optimizers(optimizer):
        _optim_items(opt, model, specs, items, prefix)
    for key, sched in _schedulers(scheduler):
        items[key] = dcp.Bytes(_dumps(key, sched.state_dict()))
    if rng:
        _rng_items(items)
    if extra is not None:
        items["extra"] = dcp.Bytes(_dumps("extra", extra))
    return items


def _dumps(key, value):
    try:
        return _json.dumps(value)
    except TypeError as e:
        raise TypeError("%s: %s" % (key, e)) from None


def _ctx_path(ctx, path):
    """(ctx, path) of a call made as f(ctx, path, ...) or f(path, ...): without
    a context, the process's dcp.Context.from_env() (see dcp.torch)."""
    if isinstance(ctx, dcp.Context):
        if path is None:
            raise dcp.InvalidError("a path is needed after the context")
        return ctx, path
    if path is not None:
        raise dcp.InvalidError("expected (ctx, path) or (path): the first argument is not a "
                               "dcp.Context")
    return _dcp_torch.default_context(), ctx


def save(ctx, path=None, *, model=None, optimizer=None, scheduler=None, rng=True, extra=None,
         shards=None, model_prefix="model.", **options):
    """Save a training state to path (collective; options as dcp.save).
    ctx may be left out: save(path, model=...) uses dcp.Context.from_env()."""
    ctx, path = _ctx_path(ctx, path)
    items = flatten(model, optimizer, scheduler, rng, extra, shards, model_prefix)
    dcp.save(ctx, items, path, **_with_kv(options, items))


def async_save(ctx, path=None, *, model=None, optimizer=None, scheduler=None, rng=True, extra=None,
               shards=None, model_prefix="model.", **options):
    """Start an async save of a training state; returns a dcp.SaveFuture once
    staged (training may change every tensor from then on)."""
    ctx, path = _ctx_path(ctx, path)
    items = flatten(model, optimizer, scheduler, rng, extra, shards, model_prefix)
    return dcp.async_save(ctx, items, path, **_with_kv(options, items))


_COMPLEX_KEY = "dcp.pytorch.complex128"  # kv: the items that are complex128 real views


def _with_kv(options, items=None):
    kv = dict(options.pop("kv", None) or {})
    kv.setdefault("framework", "torch " + torch.__version__)
    if items is not None:
        names = sorted(n for n, it in items.items() if getattr(it, "complex128", False))
        if names:
            kv[_COMPLEX_KEY] = _json.dumps(names).decode()
    options["kv"] = kv
    return options


# ---------------------------------------------------------------- loading --


def _saved_view(info, name, complex_names):
    """(shape, torch dtype) of the saved tensor as torch sees it."""
    shape = tuple(info["shape"])
    if name in complex_names:
        return shape[:-1], torch.complex128
    return shape, torch_dtype(info["dtype"])


def _dest(saved, name, spec, existing, rank, complex_names=(), cast=False):
    """(destination tensor, item, fits, copy-back) for the saved tensor
    `name`: existing when it fits, else a new tensor of this rank's box
    (copied into existing afterwards when existing is given: a
    non-contiguous tensor, or another dtype with cast)."""
    saved_shape, dtype = _saved_view(saved[name], name, complex_names)
    sharded = spec is not None and saved_shape == spec.global_shape
    if sharded and spec.layout is not None:
        shape = spec.local_shape(rank)
    elif sharded:
        shape = tuple(existing.shape) if existing is not None else None
        if shape is None:
            raise dcp.InvalidError("'%s': an offset Shard needs an existing tensor" % name)
    else:
        shape = saved_shape
    if existing is not None:
        _dcp_torch._check_destination(existing, name)
    fits = (existing is not None and tuple(existing.shape) == tuple(shape)
            and existing.dtype == dtype and existing.is_contiguous()
            and not existing.is_conj() and not existing.is_neg()
            and existing.device.type == "cpu")
    back = None
    if fits:
        t = existing
    else:
        t = torch.empty(shape, dtype=dtype)
        if existing is not None and tuple(existing.shape) == tuple(shape):
            if existing.dtype != dtype and not cast:
                raise dcp.MismatchError("'%s': the checkpoint holds %s, the tensor is %s: pass "
                                        "cast=True to convert on load"
                                        % (name, str(dtype)[6:], str(existing.dtype)[6:]))
            back = existing
    return t, _item(t, spec if sharded else None, name), fits, back


class _OptimLoad:
    """The optimizer part of a load: destinations, then apply."""

    def __init__(self, optimizer, model, specs, saved, rank, items, prefix="optim.",
                 complex_names=()):
        self.opt, self.prefix = optimizer, prefix
        self.params, self.fqns = _param_fqns(model, optimizer)
        index = {f: i for i, f in enumerate(self.fqns)}
        self.loaded = {}  # param index -> {key: tensor}
        self.in_place = True
        state_prefix = prefix + "state."
        for name in saved:
            if not name.startswith(state_prefix):
                continue
            fqn, key = name[len(state_prefix):].rsplit(".", 1)
            if fqn not in index:
                raise dcp.NotFoundError("checkpoint has optimizer state for '%s', "
                                        "which the optimizer does not have" % fqn)
            i = index[fqn]
            p = self.params[i]
            existing = self.opt.state.get(p, {}).get(key)
            existing = existing if torch.is_tensor(existing) else None
            t, items[name], fits, _ = _dest(saved, name, specs.get(fqn), existing, rank,
                                            complex_names, cast=True)
            self.in_place &= fits
            self.loaded.setdefault(i, {})[key] = t
        items[prefix + "meta"] = dcp.Bytes(None)

    def apply(self, loaded):
        meta = _loads(loaded, self.prefix + "meta")
        groups = meta["param_groups"]
        pos = {id(p): i for i, p in enumerate(self.params)}
        cur = [[self.fqns[pos[id(p)]] for p in g["params"]] for g in self.opt.param_groups]
        if [g["params"] for g in groups] != cur:
            raise dcp.MismatchError("the optimizer's parameter groups differ from the "
                                    "checkpoint's (%soptim.meta)" % self.prefix[:-len("optim.")])
        index = {f: i for i, f in enumerate(self.fqns)}
        for fqn, st in meta["other"].items():
            self.loaded.setdefault(index[fqn], {}).update(st)
        have = {i for i, p in enumerate(self.params) if self.opt.state.get(p)}
        if self.in_place and have == set(self.loaded):
            self._apply_in_place(groups)
        else:
            self._apply_by_state_dict(groups, index)

    def _apply_in_place(self, groups):
        """The tensors were loaded into the optimizer's own: set the rest."""
        for i, st in self.loaded.items():
            for key, v in st.items():
                if not torch.is_tensor(v):
                    self.opt.state[self.params[i]][key] = v
        for g, saved in zip(self.opt.param_groups, groups):
            for k, v in saved.items():
                if k != "params":
                    g[k] = v

    def _apply_by_state_dict(self, groups, index):
        sd_groups = []
        for g in groups:
            g2 = dict(g)
            g2["params"] = [index[f] for f in g["params"]]
            sd_groups.append(g2)
        self.opt.load_state_dict({"state": self.loaded, "param_groups": sd_groups})


def _loads(loaded, key):
    """The tagged JSON value of bytes item key (CorruptError naming it when
    it is not tagged JSON as dcp writes it)."""
    try:
        return _json.loads(loaded[key])
    except _json.Malformed as e:
        raise dcp.CorruptError("'%s': the checkpoint's value is %s" % (key, e)) from None


def _apply_rng(loaded):
    torch.set_rng_state(torch.frombuffer(loaded["rng.torch"], dtype=torch.uint8).clone())
    np.random.set_state(_loads(loaded, "rng.numpy"))
    random.setstate(_loads(loaded, "rng.python"))


def _extra_state_modules(model):
    """{fqn of an _extra_state entry: its module}."""
    out = {}
    for prefix, top in _models(model):
        for mname, m in top.named_modules():
            out[prefix + (mname + "." if mname else "") + "_extra_state"] = m
    return out


def _plan_load(ctx, path, model, optimizer, scheduler, rng, shards, strict, cast, model_prefix):
    """What load checks and prepares before the collective libdcp load:
    (state, {bytes item: buffer}, copies, tensors written in place, extra
    states, optimizer loads, schedulers)."""
    meta = dcp.meta_open(ctx, path)
    saved = {t["fqn"]: t for t in meta.tensors()}
    keys = {b["key"] for b in meta.bytes_items()}
    raw = meta.kv().get(_COMPLEX_KEY)
    try:
        complex_names = set(_json.loads(raw.encode())) if raw else set()
    except (_json.Malformed, TypeError):
        raise dcp.CorruptError("the checkpoint's '%s' entry is not a list of tensor names: %r"
                               % (_COMPLEX_KEY, raw)) from None
    specs = _shards(model, shards)
    items, copies, extra_states, direct = {}, [], [], []
    for name, t in _model_entries(model):
        key = model_prefix + name
        if not torch.is_tensor(t):
            if key in keys:
                items[key] = dcp.Bytes(None)
                extra_states.append((key, name))
            elif strict:
                raise dcp.NotFoundError("'%s' (extra state) is not in the checkpoint" % key)
            continue
        if key not in saved:
            if strict:
                raise dcp.NotFoundError("load: tensor '%s' is not in the checkpoint" % key)
            continue
        _, items[key], fits, back = _dest(saved, key, specs.get(name), t.detach(), ctx.rank,
                                          complex_names, cast)
        if back is not None:
            copies.append((back, items[key]))
        elif fits:
            direct.append(t)
        else:
            got = _saved_view(saved[key], key, complex_names)
            raise dcp.MismatchError("'%s': the checkpoint's tensor is %s %s, the model's %s %s"
                                    % (key, list(got[0]), str(got[1])[6:], list(t.shape),
                                       str(t.dtype)[6:]))
    optims = [_OptimLoad(o, model, specs, saved, ctx.rank, items, prefix, complex_names)
              for prefix, o in _optimizers(optimizer)]
    scheds = _schedulers(scheduler)
    for key, _ in scheds:
        items[key] = dcp.Bytes(None)
    if rng:
        for k in ("rng.torch", "rng.numpy", "rng.python"):
            items[k] = dcp.Bytes(None, dcp.SCOPE_PER_RANK)
    if "extra" in keys:
        items["extra"] = dcp.Bytes(None)
    st, loaded = dcp.build_state(ctx, items, meta)
    del meta
    return st, loaded, copies, direct, extra_states, optims, scheds


def load(ctx, path=None, *, model=None, optimizer=None, scheduler=None, rng=True, shards=None,
         strict=True, cast=False, model_prefix="model.", **options):
    """Load a training state from path into the given objects (collective;
    options as dcp.load). The model's tensors are filled in place (through a
    copy for non-contiguous ones, and with cast=True for another dtype).
    With strict=False, model tensors the checkpoint lacks are left as they
    are. model_prefix is the prefix of the model's items: "" for a Hugging
    Face safetensors import (its names are the model's own fqns). Returns
    the saved extras (None when none were saved)."""
    ctx, path = _ctx_path(ctx, path)
    try:
        st, loaded, copies, direct, extra_states, optims, scheds = _plan_load(
            ctx, path, model, optimizer, scheduler, rng, shards, strict, cast, model_prefix)
    except Exception:
        # the other ranks may be in the collective load already (a rank past
        # the saved world has no rng items): take part with nothing to load,
        # then raise, rather than leave them waiting until the timeout
        if ctx.world_size > 1:
            try:
                dcp.load(ctx, dcp.State(ctx), path)
            except dcp.Error:
                pass
        raise
    dcp.load(ctx, st, path, **options)
    del st
    with torch.no_grad():
        for dest, item in copies:  # non-contiguous, cast, or on a GPU
            dest.copy_(_tensor_of(item).to(dest.device))
    for t in direct:
        _dcp_torch._written(t)
    if extra_states:
        mods = _extra_state_modules(model)
        for key, name in extra_states:
            mods[name].set_extra_state(_loads(loaded, key))
    for o in optims:
        o.apply(loaded)
    for key, sched in scheds:
        saved_sd = _loads(loaded, key)
        sched.load_state_dict(_json.resolve(saved_sd, sched.state_dict(), key))
    if rng:
        _apply_rng(loaded)
    return _loads(loaded, "extra") if "extra" in loaded else None


def _tensor_of(item):
    """The torch tensor behind a Chunk/Sharded item made by _item."""
    return item.tensor


def latest_checkpoint(ctx, root=None, prefix="step-"):
    """The committed checkpoint under root whose name (prefix + number) has
    the highest number, or None. Uncommitted ones (a save killed before its
    atomic commit) are skipped. ctx may be left out, as for save."""
    ctx, root = _ctx_path(ctx, root)
    best = None
    for name in os.listdir(root) if os.path.isdir(root) else ():
        if not name.startswith(prefix) or not name[len(prefix):].isdigit():
            continue
        path = os.path.join(root, name)
        step = int(name[len(prefix):])
        if (best is None or step > best[0]) and dcp.committed(ctx, path):
            best = (step, path)
    return None if best is None else best[1]
