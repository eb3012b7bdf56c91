"""Tagged JSON for the small Python structures of a training state
(optimizer param_groups, scheduler state, RNG states, user extras).

JSON instead of pickle: loading a checkpoint must not run code from it.
Floats round-trip exactly (Python writes the shortest repr that reads back
to the same double, and inf/nan are allowed). Tuples, dicts with non-str
keys, numpy arrays, torch tensors, dtypes and devices, and complex numbers
are tagged so that they come back as they were. A function or method (an LR
scheduler's ``anneal_func``, CyclicLR's ``_scale_fn_ref``) is stored by name
only and comes back as a :class:`Callable` placeholder that :func:`resolve`
replaces by the loading object's own function of the same name. Anything
else is refused with TypeError, unless the caller allows pickle: then that
one value is pickled inside its tag, and decoding it needs the same opt-in.
"""

import base64
import json
import pickle
import sys
import weakref

import numpy as np

_TAG = "__dcp__"


class Callable:
    """A function saved by name: the loading side supplies its own."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "<function saved by name %s>" % self.name

    def __eq__(self, other):
        return isinstance(other, Callable) and other.name == self.name

    __hash__ = None


def callable_name(f):
    """The name a function or method is stored by (its qualified name)."""
    if isinstance(f, weakref.WeakMethod):
        f = f()
    f = getattr(f, "__func__", f)
    return "%s.%s" % (getattr(f, "__module__", "?"), getattr(f, "__qualname__", repr(f)))


def _is_function(o):
    """A function, method or weak method (what schedulers hold), not a class
    nor an object that merely has __call__."""
    if isinstance(o, weakref.WeakMethod):
        return True
    return hasattr(getattr(o, "__func__", o), "__code__")


def _enc_torch(o, torch):
    if torch.is_tensor(o):
        t = o.detach().cpu().contiguous()
        data = bytes(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""
        return {_TAG: "tensor", "dtype": str(t.dtype).replace("torch.", ""),
                "shape": list(t.shape), "v": base64.b64encode(data).decode()}
    if isinstance(o, torch.dtype):
        return {_TAG: "torch.dtype", "v": str(o).replace("torch.", "")}
    if isinstance(o, torch.device):
        return {_TAG: "torch.device", "v": str(o)}
    if isinstance(o, torch.Size):
        return {_TAG: "tuple", "v": [int(x) for x in o]}
    return None


def _enc(o, pickle_ok):
    if o is None or isinstance(o, (bool, int, float, str)):
        return o
    if isinstance(o, list):
        return [_enc(v, pickle_ok) for v in o]
    if isinstance(o, tuple) and type(o) is tuple:
        return {_TAG: "tuple", "v": [_enc(v, pickle_ok) for v in o]}
    if isinstance(o, dict) and type(o) is dict:
        if all(isinstance(k, str) for k in o) and _TAG not in o:
            return {k: _enc(v, pickle_ok) for k, v in o.items()}
        return {_TAG: "dict", "v": [[_enc(k, pickle_ok), _enc(v, pickle_ok)]
                                    for k, v in o.items()]}
    if isinstance(o, complex):
        return {_TAG: "complex", "v": [o.real, o.imag]}
    if isinstance(o, np.ndarray):
        return {_TAG: "ndarray", "dtype": o.dtype.str, "shape": list(o.shape),
                "v": o.tobytes().hex()}
    if isinstance(o, np.generic):
        return _enc(o.item(), pickle_ok)
    torch = sys.modules.get("torch")
    if torch is not None:
        t = _enc_torch(o, torch)
        if t is not None:
            return t
    if _is_function(o):
        return {_TAG: "callable", "name": callable_name(o)}
    if pickle_ok:
        return {_TAG: "pickle", "v": base64.b64encode(pickle.dumps(o)).decode()}
    raise TypeError("cannot store a %s in a checkpoint's JSON item (tagged JSON holds "
                    "None, bool, int, float, complex, str, list, tuple, dict, numpy arrays, "
                    "tensors, dtypes and functions by name; pickle is opt-in)"
                    % type(o).__name__)


def _torch_dtype(name):
    """The torch dtype named name; ValueError for any other attribute of
    torch (a checkpoint must not hand back torch.load as a "dtype")."""
    import torch
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError("%r is not a torch dtype" % (name,))
    return dtype


def _dec_tensor(o):
    import torch
    dtype = _torch_dtype(o["dtype"])
    data = base64.b64decode(o["v"])
    shape = o["shape"]
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError("tensor shape %r" % (shape,))
    numel = 1
    for n in shape:
        numel *= n
    size = torch.empty((), dtype=dtype).element_size()
    if numel * size != len(data):  # checked before allocating what the shape claims
        raise ValueError("tensor of shape %s %s holds %d bytes, not %d"
                         % (shape, o["dtype"], len(data), numel * size))
    t = torch.empty(shape, dtype=dtype)
    if t.numel():
        t.reshape(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(data),
                                                               dtype=torch.uint8))
    return t


def _dec(o, pickle_ok):
    if isinstance(o, list):
        return [_dec(v, pickle_ok) for v in o]
    if not isinstance(o, dict):
        return o
    tag = o.get(_TAG)
    if tag is None:
        return {k: _dec(v, pickle_ok) for k, v in o.items()}
    if tag == "tuple":
        return tuple(_dec(v, pickle_ok) for v in o["v"])
    if tag == "dict":
        return {_dec(k, pickle_ok): _dec(v, pickle_ok) for k, v in o["v"]}
    if tag == "complex":
        return complex(o["v"][0], o["v"][1])
    if tag == "ndarray":
        dtype = np.dtype(o["dtype"])
        if dtype.hasobject:
            raise ValueError("an ndarray of Python objects")
        a = np.frombuffer(bytes.fromhex(o["v"]), dtype=dtype)
        return a.reshape(o["shape"]).copy()
    if tag == "tensor":
        return _dec_tensor(o)
    if tag == "torch.dtype":
        return _torch_dtype(o["v"])
    if tag == "torch.device":
        import torch
        return torch.device(o["v"])
    if tag == "callable":
        return Callable(o["name"])
    if tag == "pickle":
        if not pickle_ok:
            raise PickleRefused("a pickled value (saved with allow_pickle=True)")
        data = base64.b64decode(o["v"])
        try:
            return pickle.loads(data)
        except Exception as e:  # the object's own error, not a malformed item
            raise _Unpickling(e) from None
    raise ValueError("unknown tag %r in a checkpoint's JSON item" % tag)


class PickleRefused(ValueError):
    """Decoding met a pickled value without the caller's opt-in."""


class _Unpickling(Exception):
    """Carries what pickle.loads raised past loads()'s Malformed mapping."""


class Malformed(ValueError):
    """The bytes are not tagged JSON as dumps() writes it (a damaged or
    crafted checkpoint value)."""


def dumps(obj, allow_pickle=False):
    """obj as UTF-8 bytes of tagged JSON (TypeError for what it cannot hold
    unless allow_pickle)."""
    return json.dumps(_enc(obj, allow_pickle), separators=(",", ":"),
                      sort_keys=False).encode()


def loads(data, allow_pickle=False):
    """The object dumps() encoded (data: bytes-like). A pickled value raises
    PickleRefused unless allow_pickle; Malformed for bytes that are not
    tagged JSON (not UTF-8, not JSON, a tag with missing or wrong fields)."""
    try:
        return _dec(json.loads(bytes(data).decode()), allow_pickle)
    except PickleRefused:
        raise
    except _Unpickling as e:
        raise e.args[0]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RuntimeError,
            RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Malformed("not tagged JSON as dcp writes it (%s: %s)"
                        % (type(e).__name__, e)) from None


def resolve(saved, current, where=""):
    """saved with every Callable placeholder replaced by the function at the
    same place in current (the loading object's own state) when its name
    matches; ValueError naming the place otherwise."""
    if isinstance(saved, Callable):
        if current is not None and _is_function(current) and \
                callable_name(current) == saved.name:
            return current
        raise ValueError("%s: the checkpoint holds the function %s by name, and the "
                         "loading state has no function of that name there"
                         % (where or "value", saved.name))
    if isinstance(saved, dict):
        cur = current if isinstance(current, dict) else {}
        return {k: resolve(v, cur.get(k), "%s.%s" % (where, k) if where else str(k))
                for k, v in saved.items()}
    if isinstance(saved, (list, tuple)):
        cur = current if isinstance(current, (list, tuple)) and \
            len(current) == len(saved) else [None] * len(saved)
        out = [resolve(v, c, "%s.%d" % (where, i)) for i, (v, c) in enumerate(zip(saved, cur))]
        return tuple(out) if isinstance(saved, tuple) else out
    return saved
