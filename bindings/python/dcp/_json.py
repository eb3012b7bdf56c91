"""Tagged JSON for the small Python structures of a training state
(optimizer param_groups, scheduler state, RNG states, user extras).

JSON instead of pickle: loading a checkpoint must not run code from it.
Floats round-trip exactly (Python writes the shortest repr that reads back
to the same double, and inf/nan are allowed). Tuples, dicts with non-str
keys and numpy arrays are tagged so that they come back as they were;
anything else (a tensor, an arbitrary object) is refused with TypeError.
"""

import json

import numpy as np

_TAG = "__dcp__"


def _enc(o):
    if o is None or isinstance(o, (bool, int, float, str)):
        return o
    if isinstance(o, list):
        return [_enc(v) for v in o]
    if isinstance(o, tuple):
        return {_TAG: "tuple", "v": [_enc(v) for v in o]}
    if isinstance(o, dict):
        if all(isinstance(k, str) for k in o) and _TAG not in o:
            return {k: _enc(v) for k, v in o.items()}
        return {_TAG: "dict", "v": [[_enc(k), _enc(v)] for k, v in o.items()]}
    if isinstance(o, np.ndarray):
        return {_TAG: "ndarray", "dtype": o.dtype.str, "shape": list(o.shape),
                "v": o.tobytes().hex()}
    if isinstance(o, np.generic):
        return _enc(o.item())
    raise TypeError("cannot store a %s in a checkpoint's JSON item" % type(o).__name__)


def _dec(o):
    if isinstance(o, list):
        return [_dec(v) for v in o]
    if not isinstance(o, dict):
        return o
    tag = o.get(_TAG)
    if tag is None:
        return {k: _dec(v) for k, v in o.items()}
    if tag == "tuple":
        return tuple(_dec(v) for v in o["v"])
    if tag == "dict":
        return {_dec(k): _dec(v) for k, v in o["v"]}
    if tag == "ndarray":
        a = np.frombuffer(bytes.fromhex(o["v"]), dtype=np.dtype(o["dtype"]))
        return a.reshape(o["shape"]).copy()
    raise ValueError("unknown tag %r in a checkpoint's JSON item" % tag)


def dumps(obj):
    """obj as UTF-8 bytes of tagged JSON."""
    return json.dumps(_enc(obj), separators=(",", ":"), sort_keys=False).encode()


def loads(data):
    """The object dumps() encoded (data: bytes-like)."""
    return _dec(json.loads(bytes(data).decode()))
