"""Make torch 1.13's distributed checkpoint importable on Python 3.11.

Debian's python3-torch 1.13 ships torch/distributed/_shard/sharded_tensor/
metadata.py with a dataclass field ``tensor_properties: TensorProperties =
field(default=TensorProperties())``. Python 3.11 refuses unhashable
dataclass defaults ("mutable default ... use default_factory"), so
``import torch.distributed._shard.checkpoint`` fails. This shim (used only
by bench/torch_peer.py, the peer comparison) installs an import hook that
loads that one module from its source with the default written as
``field(default_factory=TensorProperties)``, which is what the field means:
each instance gets its own default properties. Nothing on disk changes.

Call install() before importing torch.distributed._shard.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys

TARGET = "torch.distributed._shard.sharded_tensor.metadata"
OLD = b"field(default=TensorProperties())"
NEW = b"field(default_factory=TensorProperties)"


class _PatchedSource(importlib.abc.SourceLoader):
    """Loads TARGET from its .py with OLD replaced (never from bytecode:
    there is no path_stats, so a cached .pyc of the original is ignored)."""

    def __init__(self, path):
        self.path = path

    def get_filename(self, fullname):
        return self.path

    def get_data(self, path):
        with open(path, "rb") as f:
            data = f.read()
        if path == self.path:
            if OLD not in data:
                raise ImportError("torch_dcp_shim: %s no longer has the field it fixes" % path)
            data = data.replace(OLD, NEW)
        return data


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return spec
        return importlib.util.spec_from_file_location(name, spec.origin,
                                                      loader=_PatchedSource(spec.origin))


def needed():
    """Whether the plain import fails the way this shim fixes (tried in a
    child interpreter, so this one stays clean)."""
    import subprocess
    r = subprocess.run([sys.executable, "-c", "import torch.distributed._shard.checkpoint"],
                       capture_output=True, text=True)
    return r.returncode != 0 and "default_factory" in r.stderr


def install():
    """Install the hook (idempotent). Must run before the module is imported."""
    if TARGET in sys.modules:
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
