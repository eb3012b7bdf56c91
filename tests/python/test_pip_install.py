"""pip install of bindings/python, offline, into a fresh virtual
environment (with the system's site packages, where Debian's numpy and
torch are): the extension is built by the setuptools backend against the
libdcp of this build tree (DCP_BUILD_DIR), the installed package is the
one imported (not the build tree's), and it saves and loads a checkpoint
(its rpath finds libdcp, which finds its plugins).

    test_pip_install.py SOURCE_DIR BUILD_DIR
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC, BUILD = (os.path.abspath(a) for a in sys.argv[1:3])

CHECK = r'''
import os, sys, numpy as np
import dcp
venv = sys.argv[1]
assert dcp.__file__.startswith(venv), dcp.__file__
with dcp.Context() as ctx:
    w = np.arange(6, dtype=np.float32)
    dcp.save(ctx, {"w": w}, os.path.join(venv, "ckpt"))
    out = np.zeros(6, np.float32)
    dcp.load(ctx, {"w": out}, os.path.join(venv, "ckpt"))
    assert (out == w).all()
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    import dcp.torch
print("installed", dcp.version(), dcp.__file__)
'''


class PipInstall(unittest.TestCase):
    def test_offline_install_into_a_venv(self):
        with tempfile.TemporaryDirectory(prefix="dcp-pip-") as tmp:
            src = os.path.join(tmp, "python")
            # a copy: the in-tree build leaves build/ and *.egg-info behind
            shutil.copytree(os.path.join(SRC, "bindings", "python"), src,
                            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
            venv = os.path.join(tmp, "venv")
            subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                            "--system-site-packages", venv], check=True)
            py = os.path.join(venv, "bin", "python")
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env.update(DCP_BUILD_DIR=BUILD, DCP_INCLUDE_DIR=os.path.join(SRC, "include"),
                       PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                       CFLAGS="-O0 -g0")  # after Python's -O2: a quicker compile for the test
            r = subprocess.run([sys.executable, "-m", "pip", "--python", py, "install",
                                "--no-build-isolation", "--no-deps", "--no-index", src],
                               env=env, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout[-4000:] + r.stderr[-4000:])
            r = subprocess.run([py, "-c", CHECK, venv], env=env, cwd=tmp,
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("installed", r.stdout)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
