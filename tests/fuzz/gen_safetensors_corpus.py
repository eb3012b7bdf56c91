#!/usr/bin/env python3
"""Write the seed corpus of fuzz_safetensors_header (struct + json only)."""
import json, os, struct, sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "safetensors")
os.makedirs(out, exist_ok=True)

def st(tensors, meta=None):
    hdr, data, at = {}, b"", 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dtype, shape, size in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + size]}
        data += bytes((i * 37) & 0xff for i in range(size))
        at += size
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data

seeds = {
    "empty": st([]),
    "one_f32": st([("w", "F32", [2, 3], 24)]),
    "scalar_meta": st([("s", "BF16", [], 2)], {"format": "pt"}),
    "many": st([("a", "U8", [4], 4), ("b", "I64", [1, 2], 16), ("c", "F16", [0, 5], 0),
                ("d", "F8_E4M3", [3], 3), ("e", "BOOL", [2], 2), ("f", "C64", [1], 8)]),
    "gap": struct.pack("<Q", 60) + b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}      ' + b"xx",
    "bad_json": struct.pack("<Q", 8) + b'{"a":[1,',
}
for name, blob in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(blob)
