"""dcp.Context.from_env(): the context of one process of a torchrun job.

torchrun (torch.distributed.run) gives every process RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; a script that
called torch.distributed.init_process_group has its ranks there too.
:func:`from_env` takes the rank and world size from the process group when
one is initialised (else from the variables), and for a world of more
than one opens libdcp's gloo collective:

* **rendezvous**: ``"store"`` (the default when MASTER_ADDR is set) meets
  through the gloo plugin's TCP store that rank 0 serves at MASTER_ADDR
  during open (``store=HOST:PORT``; port MASTER_PORT+1 for the trainers,
  +2 for the async writers, or ``$DCP_STORE_PORT`` and the next one): no
  shared directory, any number of hosts. ``"dir"`` (the fallback, and the
  default without MASTER_ADDR) meets in a directory: the
  ``rendezvous_dir=`` argument, else ``$DCP_RENDEZVOUS``, else one that rank
  0 creates under the temporary directory and sends to the others through
  the process group (or, with no process group, a name every process
  derives from MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RUN_ID). The last
  two only work on one host: a job over several hosts names a shared
  directory.
* **interface**: each rank listens on the address its host routes toward
  MASTER_ADDR: with a store the plugin finds it (a connected UDP socket,
  nothing sent), with a directory this module does the same and passes
  ``host=``; 127.0.0.1 when MASTER_ADDR is this host or unset.
* **async saves**: the writers' coordination is set to the same gloo
  rendezvous, so :func:`dcp.async_save` works with no further call.
"""

import hashlib
import os
import socket
import sys
import tempfile

from . import _dcp

# "store" or "dir": the rendezvous from_env uses when none is asked for
# (a store needs MASTER_ADDR; without it from_env falls back to "dir").
DEFAULT_RENDEZVOUS = "store"

_MAX_WORLD = 2 ** 31 - 1  # a dcp.Context's world_size is a C int


def _int_env(name, default=None):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise _dcp.InvalidError("Context.from_env(): %s=%r is not an integer" % (name, v)) \
            from None


def _process_group():
    """torch.distributed when a default process group is initialised."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def ranks():
    """(rank, world_size, local_rank) of this process: the initialised
    torch.distributed process group's when there is one, else torchrun's
    RANK / WORLD_SIZE / LOCAL_RANK (0, 1, 0 when unset)."""
    env_rank, env_world = _int_env("RANK"), _int_env("WORLD_SIZE")
    dist = _process_group()
    if dist is not None:
        rank, world = dist.get_rank(), dist.get_world_size()
        if env_world is not None and (env_world, env_rank) != (world, rank):
            raise _dcp.InvalidError(
                "Context.from_env(): the process group is rank %d of %d but the environment "
                "says RANK=%s WORLD_SIZE=%s" % (rank, world, env_rank, env_world))
    else:
        if env_rank is None and env_world is not None and env_world > 1:
            # every process would be rank 0: all would serve the rendezvous
            raise _dcp.InvalidError(
                "Context.from_env(): WORLD_SIZE=%d but RANK is not set (every process would "
                "be rank 0): launch with torchrun, or set RANK in each process" % env_world)
        rank = env_rank if env_rank is not None else 0
        world = env_world if env_world is not None else 1
    if not 1 <= world <= _MAX_WORLD:
        raise _dcp.InvalidError("Context.from_env(): WORLD_SIZE=%d is not in 1..%d"
                                % (world, _MAX_WORLD))
    if not 0 <= rank < world:
        raise _dcp.InvalidError("Context.from_env(): RANK=%d is not in 0..WORLD_SIZE-1 (%d)"
                                % (rank, world - 1))
    local_rank = _int_env("LOCAL_RANK", 0)
    local_world = _int_env("LOCAL_WORLD_SIZE")
    if local_world is not None and not 1 <= local_world <= world:
        raise _dcp.InvalidError("Context.from_env(): LOCAL_WORLD_SIZE=%d is not in "
                                "1..WORLD_SIZE (%d)" % (local_world, world))
    if local_rank < 0 or local_rank >= (local_world if local_world is not None else world):
        raise _dcp.InvalidError("Context.from_env(): LOCAL_RANK=%d is not in 0..%s-1 (%d)" % (
            local_rank, "LOCAL_WORLD_SIZE" if local_world is not None else "WORLD_SIZE",
            (local_world if local_world is not None else world) - 1))
    return rank, world, local_rank


def _is_local(addr):
    try:
        infos = socket.getaddrinfo(addr, None)
    except OSError:
        return False
    for info in infos:
        ip = info[4][0]
        if ip.startswith("127.") or ip == "::1":
            return True
        try:  # an address of this host can be bound
            with socket.socket(info[0], socket.SOCK_DGRAM) as s:
                s.bind((ip, 0))
            return True
        except OSError:
            pass
    return False


def route_address(master, port=29500):
    """This host's address toward master (the source address the kernel
    picks for a datagram to it; nothing is sent); 127.0.0.1 when master is
    this host or unset."""
    if not master or _is_local(master):
        return "127.0.0.1"
    if not 1 <= port <= 65535:
        raise _dcp.InvalidError("Context.from_env(): MASTER_PORT=%d is not in 1..65535" % port)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, port))
            return s.getsockname()[0]
    except OSError as e:  # does not resolve, no route
        raise _dcp.InvalidError("Context.from_env(): no route to MASTER_ADDR=%s (%s): set it "
                                "to rank 0's host, or pass coll_options='host=...'"
                                % (master, e)) from None


def _multi_host(world):
    local_world = _int_env("LOCAL_WORLD_SIZE")
    return local_world is not None and local_world < world


def _agree_dir(rank, world):
    """A rendezvous directory every rank of this job names the same."""
    dist = _process_group()
    if dist is not None:
        box = [tempfile.mkdtemp(prefix="dcp-rdv-") if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    master, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not master or not port:
        raise _dcp.InvalidError(
            "Context.from_env(): WORLD_SIZE=%d but neither an initialised torch.distributed "
            "process group nor MASTER_ADDR/MASTER_PORT to agree on a rendezvous with: launch "
            "with torchrun, call init_process_group first, or pass rendezvous_dir=" % world)
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    tag = hashlib.sha256(("%s:%s:%s:%d" % (master, port, run, world)).encode()).hexdigest()
    path = os.path.join(tempfile.gettempdir(), "dcp-rdv-%d-%s" % (os.getuid(), tag[:16]))
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def from_env(cls=None, *, rendezvous=None, rendezvous_dir=None, async_writers=True,
             coll_options=None, **options):
    """The dcp.Context of this process (see the module's docstring).

    rendezvous: "store" or "dir" (default: DEFAULT_RENDEZVOUS when
    MASTER_ADDR is set and no directory is named, else "dir");
    rendezvous_dir: the directory for "dir" (shared by every host);
    async_writers: set the async writers' coordination (world > 1);
    coll_options: more gloo options (e.g. "iface=eth1" instead of the
    automatic host=); the rest (storage, timeout_ms, lease_ms, ...) go to
    dcp.Context unchanged."""
    cls = cls or _dcp.Context
    for k in ("rank", "world_size", "coll"):
        if k in options:
            raise _dcp.InvalidError("Context.from_env(): %s= comes from the environment; "
                                    "call dcp.Context(%s=...) to choose it" % (k, k))
    rank, world, _ = ranks()
    if world == 1:
        return cls(rank=0, world_size=1, **options)
    master = os.environ.get("MASTER_ADDR")
    if rendezvous:
        mode = rendezvous
    elif rendezvous_dir or os.environ.get("DCP_RENDEZVOUS") or not master:
        mode = "dir"  # a directory named, or no store address to meet at
    else:
        mode = DEFAULT_RENDEZVOUS
    if mode not in ("dir", "store"):
        raise _dcp.InvalidError("Context.from_env(): rendezvous=%r: expected 'dir' or 'store'"
                                % (mode,))
    extra = [o for o in (coll_options or "").split(",") if o]
    chosen = any(o.startswith(("host=", "iface=")) for o in extra)
    if mode == "store":
        if not master:
            raise _dcp.InvalidError("Context.from_env(): rendezvous='store' needs MASTER_ADDR")
        base = _int_env("DCP_STORE_PORT") or _int_env("MASTER_PORT", 29500) + 1
        host = "[%s]" % master if ":" in master and not master.startswith("[") else master
        trainer = ",".join(extra + ["store=%s:%d" % (host, base)])
        writer = ",".join(extra + ["store=%s:%d" % (host, base + 1), "job=dcpwriter"])
        rdv = None
    else:
        if not chosen:
            extra.append("host=" + route_address(master, _int_env("MASTER_PORT", 29500)))
        rdv = rendezvous_dir or os.environ.get("DCP_RENDEZVOUS")
        if not rdv:
            if _multi_host(world):
                raise _dcp.InvalidError(
                    "Context.from_env(): the job spans several hosts (LOCAL_WORLD_SIZE < "
                    "WORLD_SIZE): pass rendezvous_dir= (or set DCP_RENDEZVOUS) to a directory "
                    "every host shares, or use rendezvous='store'")
            rdv = _agree_dir(rank, world)
        trainer = ",".join(extra)
        writer = ",".join(extra + ["job=dcpwriter"])
    ctx = cls(rank=rank, world_size=world, coll="gloo", rendezvous=rdv,
              coll_options=trainer or None, **options)
    if async_writers:
        ctx.set_async_coordination("gloo", rdv, writer)
    return ctx
