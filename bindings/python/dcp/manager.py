"""dcp.CheckpointManager: a training run's checkpoints under one root.

Step N is the checkpoint ``ROOT/step-N`` (an ordinary libdcp checkpoint that
records its step); ``ROOT/latest`` names the newest durable step; a
retention policy deletes old steps, never the newest durable one, and only
once a newer step is durable (for :meth:`CheckpointManager.save_async`: at
:meth:`~CheckpointManager.wait`, never at staging). See docs/manager.md.

    with dcp.CheckpointManager(ctx, "/ckpt/run1", keep_last=3, keep_every=1000) as mgr:
        step = mgr.restore(model_items)          # None on a fresh start
        for step in range(step + 1 if step is not None else 0, steps):
            train_one_step()
            if step % 100 == 0:
                mgr.save_async(step, model_items)
            if mgr.should_save():                # SIGTERM on any rank (install_signal_handler)
                mgr.save_now(step, model_items)
                break
        mgr.wait()
"""

import math
import operator
from collections import namedtuple

from . import _dcp
from ._dcp import State

__all__ = ["CheckpointManager", "StepInfo"]

StepInfo = namedtuple("StepInfo", "step state bytes keep note")
StepInfo.__doc__ = """One step directory: ``state`` is "committed", "pending",
"incomplete", "corrupt" or "foreign"; ``keep`` whether the retention policy
keeps it; ``note`` why (a reason or the verdict)."""


def _whole(name, v, limit):
    """v as an int in 0..limit-1 (InvalidError naming the argument): a float,
    a str or a bool is not a step or a count, and a value past the C field
    would wrap around (keep_last=2**32+1 would keep one step)."""
    if isinstance(v, bool):
        raise _dcp.InvalidError("%s=%r: an integer is needed" % (name, v))
    try:
        n = operator.index(v)
    except TypeError:
        raise _dcp.InvalidError("%s=%r: an integer is needed" % (name, v)) from None
    if not 0 <= n < limit:
        raise _dcp.InvalidError("%s=%d is not in 0..%d" % (name, n, limit - 1))
    return n


_STEPS = 2 ** 63  # a step is an int64


def _step(step):
    return _whole("step", step, _STEPS)


def _state_of(ctx, items, meta=None):
    """A dcp.State for items (a State, or a dict as dcp.build_state takes)."""
    if isinstance(items, State):
        return items, {}
    from . import build_state  # the package's helper (no import cycle at load)
    return build_state(ctx, items, meta)


class CheckpointManager:
    """Steps, ``latest``, retention and auto-resume over ``root`` (collective
    over ctx's ranks: every rank makes the same calls).

    keep_last: keep the newest N committed steps (None or 0: all).
    keep_every: also keep every step that is a multiple of it, for good.
    max_bytes: delete the oldest steps kept only by keep_last until the
        committed steps total at most this many bytes.
    keep: steps always kept: an iterable of step numbers, or a callable
        ``keep(step) -> bool`` (called on rank 0).
    read_only: list, resume and load only (no lease on the root; for tools
        beside a running job).
    auto_gc: run retention after every durable save (else only :meth:`gc`).
    keep_incomplete: never delete incomplete directories (crashed saves).
    log: callable(line) for the manager's log lines (rank 0), default stderr;
        ``quiet=True`` silences them.
    defer_fence: with background staging (``ctx.set_async_staging(True)``),
        :meth:`save_async` returns before the copy; call :meth:`fence`
        before the saved buffers change (the optimizer step).

    A second manager on the same root (in any job) raises dcp.BusyError.
    """

    def __init__(self, ctx, root, *, keep_last=None, keep_every=None, max_bytes=None,
                 keep=None, read_only=False, auto_gc=True, keep_incomplete=False, log=None,
                 quiet=False, defer_fence=False):
        keep_steps, keep_fn = (), None
        if callable(keep):
            keep_fn = keep
        elif keep is not None:
            if isinstance(keep, (str, bytes)):
                raise _dcp.InvalidError("keep=%r: step numbers or a callable" % (keep,))
            keep_steps = tuple(_whole("keep step", s, _STEPS) for s in keep)
        counts = {name: _whole(name, v or 0, limit) for name, v, limit in (
            ("keep_last", keep_last, 2 ** 32), ("keep_every", keep_every, 2 ** 63),
            ("max_bytes", max_bytes, 2 ** 63))}
        self._ctx = ctx
        self.root = str(root)
        self._m = _dcp.Manager(ctx, self.root, **counts,
                               keep_steps=keep_steps, keep=keep_fn, read_only=bool(read_only),
                               auto_gc=bool(auto_gc), keep_incomplete=bool(keep_incomplete),
                               quiet=bool(quiet), log=log, defer_fence=bool(defer_fence))
        self._staged = None  # the pending async save's state (kept until it is done)

    @property
    def ctx(self):
        """The dcp.Context the manager saves and loads with."""
        return self._ctx

    # -- saving ---------------------------------------------------------------
    def save(self, step, items, **options):
        """Save ``items`` (a dcp.State or a dict of name -> item) as ``step``;
        durable on return, then ``latest`` and retention move. ``step`` must
        be newer than every committed step. Options as dcp.save (compress,
        block_size, kv={str: str}, ...; ``dcp.step`` is the manager's key)."""
        st, _ = _state_of(self._ctx, items)
        self._m.save(_step(step), st, **options)
        self._staged = None

    def save_async(self, step, items, **options):
        """Start an async save of ``items`` as ``step`` and return once
        staged (the buffers may change). ``latest`` and retention move only
        when it is durable: at :meth:`wait`, or at the next save. With
        background staging (``ctx.set_async_staging(True)``) and
        ``defer_fence=True`` it returns before the copy: call :meth:`fence`
        before the buffers change (the optimizer step)."""
        st, _ = _state_of(self._ctx, items)
        self._m.save_async(_step(step), st, **options)
        self._staged = st

    def fence(self):
        """Block until the pending async save is staged (at once when none
        is, or it was staged in blocking mode); from then on its buffers may
        change. Raises the staging's dcp.Error (``wait`` raises it too)."""
        self._m.fence()

    def wait(self, timeout=None):
        """Wait for the pending async save (seconds, None: no limit); raise
        its dcp.Error. On success ``latest`` and retention move. A timeout
        raises dcp.TimedOutError and leaves the save pending."""
        self._m.wait(timeout)
        if self._m.pending_step is None:
            self._staged = None

    def abort(self):
        """Give up on the pending async save: its step stays uncommitted."""
        self._m.abort()
        self._staged = None

    @property
    def pending_step(self):
        """The step of the async save not yet durable, or None."""
        return self._m.pending_step

    # -- looking ----------------------------------------------------------------
    def steps(self):
        """Every step directory, ascending: a list of :class:`StepInfo`."""
        return [StepInfo(*t) for t in self._m.steps()]

    @property
    def latest_step(self):
        """The newest committed step (this rank's listing), or None."""
        committed = [s.step for s in self.steps() if s.state == "committed"]
        return committed[-1] if committed else None

    def step_path(self, step):
        """The directory of ``step``: ROOT/step-N."""
        return self._m.step_path(_step(step))

    # -- resuming ---------------------------------------------------------------
    def resume(self, verify=False):
        """The newest loadable step (committed and its metadata verifies;
        with ``verify`` every block too, falling back to older steps), or
        None. Collective: every rank gets rank 0's answer."""
        return self._m.resume(verify=bool(verify))

    def load(self, step, items, **options):
        """Load ``step`` into ``items`` (a dcp.State or a dict), resharding as
        needed. Returns {name: bytearray} of bytes items allocated for
        ``dcp.Bytes(None)`` entries. Options as dcp.load."""
        meta = None
        if not isinstance(items, State):
            from . import Bytes
            if any(isinstance(i, Bytes) and i.data is None for i in items.values()):
                meta = _dcp.meta_open(self._ctx, self.step_path(step))
        st, allocated = _state_of(self._ctx, items, meta)
        del meta
        self._m.load(_step(step), st, **options)
        return allocated

    def restore(self, items, verify=False, **options):
        """:meth:`resume` then :meth:`load` into ``items``: the step restored,
        or None when there is none (``items`` untouched)."""
        step = self.resume(verify=verify)
        if step is not None:
            self.load(step, items, **options)
        return step

    # -- retention -----------------------------------------------------------------
    def gc(self, dry_run=False):
        """Run the retention policy now (collective); returns the report dict
        (deleted, kept, failed, kept_bytes, over_budget, message)."""
        return self._m.gc(dry_run=bool(dry_run))

    @property
    def last_gc(self):
        """The report of the retention that ran after the last durable save."""
        return self._m.gc_result()

    # -- preemption ------------------------------------------------------------------
    def install_signal_handler(self):
        """Make SIGTERM and SIGUSR1 request a preemption save (a flag only).
        Note that Python's own handlers for those signals are replaced."""
        self._m.install_signal_handler()

    def request_save(self):
        """Request a preemption save at the next :meth:`should_save` (for
        frameworks that own their signal handlers)."""
        self._m.request_save()

    def should_save(self):
        """At a step boundary, collective: True on every rank when any rank
        requested a preemption save. A rank that does not join within the
        context's timeout raises dcp.TimedOutError (or dcp.PeerError) on the
        others: skip the save rather than hang."""
        return self._m.should_save()

    def save_now(self, step, items, grace=30.0, **options):
        """The preemption save: async, then wait at most ``grace`` seconds
        for it to be durable; raises dcp.TimedOutError (the save aborted, the
        previous steps untouched) when it is not."""
        step = _step(step)
        if not isinstance(grace, (int, float)) or isinstance(grace, bool) or \
                not 0 <= grace < 1e9 or math.isnan(grace):
            raise _dcp.InvalidError("save_now: grace=%r: seconds, 0 or more (finite)" % (grace,))
        st, _ = _state_of(self._ctx, items)
        self._m.save_now(step, st, int(grace * 1000), **options)
        self._staged = None

    # -- lifetime ----------------------------------------------------------------------
    def close(self):
        """Wait for a pending async save (without moving latest: call
        :meth:`wait` first for that) and release the root."""
        self._m.close()
        self._staged = None

    @property
    def closed(self):
        return self._m.closed

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and self.pending_step is not None:
            self.wait()
        self.close()
        return False

    def __repr__(self):
        return "CheckpointManager(%r%s)" % (self.root, ", closed" if self.closed else "")
