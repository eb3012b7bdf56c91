"""Build of the extension dcp._dcp for pip (see pyproject.toml).

libdcp is looked for, first match wins:
  DCP_BUILD_DIR   a CMake build tree of libdcp (lib/libdcp.so in it); the
                  headers come from DCP_INCLUDE_DIR or the source tree
                  two levels above this file
  DCP_PREFIX      an install prefix (include/dcp.h, lib*/libdcp.so)
  pkg-config dcp  an installed libdcp
  ../../build*    an in-tree build next to this source tree (not a
                  sanitizer or fuzzing one)
The extension's rpath points at the library directory found, so it loads
that libdcp (which finds its plugins and dcp-writer next to itself).
"""

import glob
import os
import re
import shlex
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(os.path.dirname(HERE))


def _fail(msg):
    raise SystemExit("libdcp: " + msg + " (set DCP_BUILD_DIR to a CMake build of libdcp, "
                     "or DCP_PREFIX to an install prefix)")


def _lib_dir(root):
    for sub in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu"),
                os.path.join("lib", "aarch64-linux-gnu")):
        if glob.glob(os.path.join(root, sub, "libdcp.so*")):
            return os.path.join(root, sub)
    return None


def _from_build(build, include=None):
    lib = _lib_dir(build)
    if lib is None:
        _fail("no lib/libdcp.so in the build tree %s (build it first)" % build)
    include = include or os.path.join(TREE, "include")
    if not os.path.exists(os.path.join(include, "dcp.h")):
        _fail("no dcp.h in %s (set DCP_INCLUDE_DIR)" % include)
    return include, lib


def _pkg_config():
    try:
        cflags = subprocess.run(["pkg-config", "--cflags-only-I", "dcp"], check=True,
                                capture_output=True, text=True).stdout
        libs = subprocess.run(["pkg-config", "--libs-only-L", "dcp"], check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    inc = [f[2:] for f in shlex.split(cflags) if f.startswith("-I")]
    lib = [f[2:] for f in shlex.split(libs) if f.startswith("-L")]
    if not lib:
        out = subprocess.run(["pkg-config", "--variable=libdir", "dcp"], capture_output=True,
                             text=True).stdout.strip()
        lib = [out] if out else []
    return (inc[0] if inc else "/usr/include"), (lib[0] if lib else "/usr/lib")


def find_libdcp():
    """(include dir, library dir) of the libdcp to build against."""
    if os.environ.get("DCP_BUILD_DIR"):
        return _from_build(os.path.abspath(os.environ["DCP_BUILD_DIR"]),
                           os.environ.get("DCP_INCLUDE_DIR"))
    if os.environ.get("DCP_PREFIX"):
        prefix = os.path.abspath(os.environ["DCP_PREFIX"])
        lib = _lib_dir(prefix)
        if lib is None or not os.path.exists(os.path.join(prefix, "include", "dcp.h")):
            _fail("no include/dcp.h and lib/libdcp.so under DCP_PREFIX=%s" % prefix)
        return os.path.join(prefix, "include"), lib
    found = _pkg_config()
    if found:
        return found
    for build in sorted(glob.glob(os.path.join(TREE, "build*"))):
        if any(k in os.path.basename(build) for k in ("asan", "tsan", "fuzz", "san")):
            continue  # an instrumented libdcp cannot load into a plain interpreter
        if _lib_dir(build) and os.path.exists(os.path.join(TREE, "include", "dcp.h")):
            return _from_build(build)
    _fail("not found")


def version(include):
    with open(os.path.join(include, "dcp.h")) as f:
        text = f.read()
    parts = [re.search(r"#define DCP_VERSION_%s (\d+)" % k, text) for k in
             ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else "0"


include_dir, lib_dir = find_libdcp()
setup(
    version=version(include_dir),
    ext_modules=[Extension(
        "dcp._dcp",
        sources=sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "src", "*.c"))),
        include_dirs=[include_dir],
        library_dirs=[lib_dir],
        runtime_library_dirs=[lib_dir],
        libraries=["dcp"],
        extra_compile_args=["-std=c11"],
    )],
)
