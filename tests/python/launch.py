"""Start a job of N rank processes (/usr/bin/python3 script, RANK and
WORLD_SIZE in the environment; with torchrun=True every variable torchrun
sets: MASTER_ADDR, MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
TORCHELASTIC_RUN_ID, ...), wait for it, or kill it whole: the ranks
and the dcp-writer processes they spawned, all with SIGKILL, as a
scheduler killing a job would. The test process makes itself a child
subreaper, so writers orphaned by the kill are reparented to it and reaped
here instead of lingering (and perhaps still committing) while the next
job starts."""

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def children_of(pids):
    """Pids whose parent is in pids (from /proc/*/stat)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        # the command may contain spaces and parentheses: split after the last ')'
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) in pids:
            out.append(int(name))
    return out


def free_port():
    """A TCP port nothing listens on now, with the next two free too (the
    stores of libdcp's trainer and writer groups beside torch's)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            for k in (1, 2):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + k))
            return port
        except OSError:
            continue
    raise OSError("no free run of three ports")


def torchrun_env(rank, world, port, run_id):
    """The variables torch.distributed.run gives rank `rank` of a one-host
    job (torch 1.13's launcher itself fails on Python 3.11 in Debian)."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
            "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world), "ROLE_NAME": "default",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "TORCHELASTIC_RUN_ID": run_id, "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0", "OMP_NUM_THREADS": "1"}


class Job:
    """N ranks of `script args`, each logging to workdir/log.<rank>."""

    def __init__(self, script, world, args, workdir, env=None, torchrun=False):
        self.script, self.world, self.args, self.workdir = script, world, args, workdir
        self.env = dict(os.environ, **(env or {}))
        self.torchrun = torchrun
        self.procs = []

    def start(self):
        os.makedirs(self.workdir, exist_ok=True)
        port = free_port() if self.torchrun else None
        for r in range(self.world):
            if self.torchrun:
                env = dict(self.env, **torchrun_env(r, self.world, port,
                                                    "job-%d-%d" % (os.getpid(), port)))
            else:
                env = dict(self.env, RANK=str(r), WORLD_SIZE=str(self.world))
            log = open(os.path.join(self.workdir, "log.%d" % r), "w")
            self.procs.append(subprocess.Popen([sys.executable, self.script] + self.args,
                                               env=env, stdout=log, stderr=subprocess.STDOUT))
            log.close()
        return self

    def logs(self):
        out = []
        for r in range(self.world):
            with open(os.path.join(self.workdir, "log.%d" % r)) as f:
                out.append("---- rank %d ----\n%s" % (r, f.read()[-4000:]))
        return "\n".join(out)

    def wait(self, timeout):
        """Wait for every rank; raise with the logs when one fails or the
        job outlives timeout seconds (then it is killed)."""
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.dump_stacks()
                self.kill()
                raise AssertionError("job timed out after %ds\n%s" % (timeout, self.logs()))
        codes = [p.returncode for p in self.procs]
        if any(codes):
            raise AssertionError("ranks exited with %s\n%s" % (codes, self.logs()))

    def dump_stacks(self):
        """Ask every live rank for its Python stacks (ranks that called
        faulthandler.register(SIGUSR1) write them to their log)."""
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGUSR1)
        time.sleep(1)

    def kill(self):
        """SIGKILL every rank and every writer they spawned; reap them all.
        Returns the ranks' exit codes (negative signal numbers)."""
        pids = {p.pid for p in self.procs}
        writers = children_of(pids)
        for pid in list(pids) + writers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        codes = [p.wait() for p in self.procs]
        for pid in writers:  # now ours (subreaper) unless already gone
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        return codes


def wait_for(predicate, timeout, what, job=None):
    """Poll predicate until true; fail after timeout seconds (with the logs)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if job is not None and any(p.poll() is not None for p in job.procs):
            raise AssertionError("a rank exited while waiting for %s\n%s" % (what, job.logs()))
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s\n%s" % (what, job.logs() if job else ""))
        time.sleep(0.05)
