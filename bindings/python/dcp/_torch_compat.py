"""torch 1.13 on Python 3.11: make ``torch.distributed._shard`` importable.

Debian's python3-torch 1.13 declares, in
``torch/distributed/_shard/sharded_tensor/metadata.py``, a dataclass field
whose default is an instance (``field(default=TensorProperties())``).
Python 3.11 rejects unhashable dataclass defaults, so ShardedTensor, FSDP
and torch's distributed checkpoint all fail to import. :func:`ensure`
installs a meta-path hook that compiles that one module from its source
with the default spelled ``field(default_factory=TensorProperties)`` (each
instance gets its own properties, which is what the field means). Nothing
on disk changes; on a torch that imports cleanly the hook is never added.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys

_MODULE = "torch.distributed._shard.sharded_tensor.metadata"
_BROKEN = b"field(default=TensorProperties())"
_FIXED = b"field(default_factory=TensorProperties)"


class _Loader(importlib.abc.SourceLoader):
    def __init__(self, filename):
        self._filename = filename

    def get_filename(self, fullname):
        return self._filename

    def get_data(self, path):
        with open(path, "rb") as f:
            src = f.read()
        if path == self._filename:
            src = src.replace(_BROKEN, _FIXED)
        return src


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not (spec.origin or "").endswith(".py"):
            return spec
        with open(spec.origin, "rb") as f:
            if _BROKEN not in f.read():
                return spec
        return importlib.util.spec_from_file_location(name, spec.origin,
                                                      loader=_Loader(spec.origin))


def ensure():
    """Install the hook once (before torch.distributed._shard is imported)."""
    if sys.version_info < (3, 11) or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    if _MODULE in sys.modules:
        return
    sys.meta_path.insert(0, _Finder())


def sharded_tensor_module():
    """torch.distributed._shard.sharded_tensor, or None where it is missing."""
    ensure()
    try:
        import torch.distributed._shard.sharded_tensor as st
    except ImportError:
        return None
    return st


def torch_checkpoint_module():
    """torch's distributed checkpoint: torch.distributed.checkpoint (2.x)
    or torch.distributed._shard.checkpoint (1.13)."""
    ensure()
    try:
        import torch.distributed.checkpoint as tcp
    except ImportError:
        import torch.distributed._shard.checkpoint as tcp
    return tcp
