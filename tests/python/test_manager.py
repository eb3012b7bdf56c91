"""dcp.CheckpointManager in one process: steps saved sync and async with a
retention policy, latest, resume and bit-exact restore, a keep predicate
and list, the log callback, a second manager on the root (BusyError), a
read-only one beside it, a root that is a file, callbacks that raise, the
preemption calls (request_save, should_save, save_now), and defer_fence
under background staging."""
import os
import sys
import tempfile

import numpy as np

import dcp


def check(cond, what):
    if not cond:
        print("FAILED:", what)
        sys.exit(1)


def values(step):
    return (np.arange(64, dtype=np.uint32) * 2654435761 + step * 40503) & 0xFFFFFFFF


def main():
    tmp = tempfile.mkdtemp(prefix="dcp-mgr-py-")
    root = os.path.join(tmp, "root")
    ctx = dcp.Context()
    w = np.zeros(64, dtype=np.uint32)
    lines = []
    mgr = dcp.CheckpointManager(ctx, root, keep_last=2, keep=lambda s: s == 2, log=lines.append)
    check(mgr.restore({"w": w}) is None, "a fresh root has nothing to resume")
    for step in range(1, 7):
        w[:] = values(step)
        if step % 2:
            mgr.save_async(step, {"w": w, "tag": b"step %d" % step})
            check(mgr.pending_step == step, "pending")
            w[:] = 0  # staged: the buffer may change
            mgr.wait()
        else:
            mgr.save(step, {"w": w, "tag": b"step %d" % step}, kv={"lr": "0.5"})
        check(mgr.pending_step is None, "nothing pending after a durable save")
        with open(os.path.join(root, "latest")) as f:
            check(f.read().strip() == "step-%d" % step, "latest names step %d" % step)
    steps = mgr.steps()
    check([s.step for s in steps] == [2, 5, 6], "retention kept %r" % (steps,))
    check(all(s.state == "committed" and s.keep for s in steps), "states %r" % (steps,))
    check(any("deleted" in l for l in lines), "deletions are logged: %r" % lines)
    check(mgr.last_gc["deleted"] >= 1 and mgr.last_gc["status"] == 0, "gc report")
    check(mgr.latest_step == 6, "latest_step")
    check(mgr.ctx is ctx and mgr.root == root, "ctx and root")

    # steps that do not move forward; the manager's own key
    for bad in (lambda: mgr.save(6, {"w": w}), lambda: mgr.save(7, {"w": w}, kv={"dcp.step": "1"})):
        try:
            bad()
            check(False, "a bad save was accepted")
        except dcp.InvalidError:
            pass

    # a second manager on the root; a read-only one beside it
    try:
        dcp.CheckpointManager(ctx, root)
        check(False, "two managers on one root")
    except dcp.BusyError as e:
        check("another checkpoint manager" in e.message, e.message)
    ro = dcp.CheckpointManager(ctx, root, read_only=True, quiet=True)
    check(ro.resume() == 6, "read-only resume")
    try:
        ro.gc()
        check(False, "a read-only gc deleted")
    except dcp.InvalidError:
        pass
    check(ro.gc(dry_run=True)["deleted"] == 0, "dry run")
    ro.close()

    # restore bit for bit, the bytes item allocated from the metadata
    w[:] = 0
    got = mgr.load(5, {"w": w, "tag": dcp.Bytes(None)})
    check(np.array_equal(w, values(5)) and bytes(got["tag"]) == b"step 5", "load 5")
    w[:] = 0
    check(mgr.restore({"w": w}, verify=True) == 6 and np.array_equal(w, values(6)), "restore 6")

    # preemption: a request on this rank makes the (one-rank) agreement say yes once
    check(mgr.should_save() is False, "no request yet")
    mgr.request_save()
    check(mgr.should_save() is True, "requested")
    check(mgr.should_save() is False, "the flag is cleared")
    w[:] = values(9)
    mgr.save_now(9, {"w": w}, grace=30)
    check(mgr.resume() == 9, "the preemption save is durable")
    mgr.close()
    check(mgr.closed, "closed")
    try:
        mgr.steps()
        check(False, "a closed manager listed")
    except dcp.InvalidError:
        pass

    # a keep predicate that raises: the error reaches the caller, the step is kept
    def boom(step):
        raise RuntimeError("no keep for %d" % step)
    mgr = dcp.CheckpointManager(ctx, root, keep_last=1, keep=boom, quiet=True)
    w[:] = values(10)
    try:
        mgr.save(10, {"w": w})
        check(False, "the predicate's error was lost")
    except RuntimeError as e:
        check("no keep" in str(e), str(e))
    check("step-6" in os.listdir(root), "a failing predicate keeps the steps")
    mgr.close()

    # background staging with the fence deferred to the caller: buffers
    # changed after fence() never reach the step
    ctx.set_async_staging(True)
    mgr = dcp.CheckpointManager(ctx, os.path.join(tmp, "deferred"), quiet=True, defer_fence=True)
    mgr.fence()  # nothing pending: returns at once
    big = np.zeros(1 << 20, dtype=np.uint32)
    for step in (20, 21):
        w[:] = values(step)
        big[:] = step
        mgr.save_async(step, {"w": w, "big": big})
        mgr.fence()
        w[:] = 0
        big[:] = 0
    mgr.wait()
    for step in (20, 21):
        mgr.load(step, {"w": w, "big": big})
        check((w == values(step)).all() and (big == step).all(), "deferred step %d" % step)
    mgr.close()
    ctx.set_async_staging(False)

    # a root that is a file
    path = os.path.join(tmp, "afile")
    open(path, "w").close()
    try:
        dcp.CheckpointManager(ctx, path)
        check(False, "a file as root")
    except dcp.InvalidError as e:
        check("not a directory" in e.message, e.message)
    ctx.close()
    print("manager: ok")


if __name__ == "__main__":
    main()
