"""End to end: DDP training over 4 processes (gloo), async-saving every 3
steps through libdcp, is killed with SIGKILL (ranks and writers) after the
step-6 checkpoint has persisted; a fresh job resumes from the latest
committed checkpoint and trains to the end. The parameters, the optimizer
state and the losses must equal those of an uninterrupted run bit for bit.

Run: python3 test_ddp_resume.py (PYTHONPATH must reach the dcp package)."""

import os
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launch  # noqa: E402

WORLD, STEPS, EVERY, KILL_AFTER = 4, 12, 3, 6
TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_trainer.py")


def run(mode, root, name, ckpt, extra_env=None):
    work, out = os.path.join(root, name), os.path.join(root, name + ".out")
    os.makedirs(out)
    args = [mode, "--work", work, "--ckpt", ckpt, "--out", out, "--steps", str(STEPS),
            "--every", str(EVERY)]
    return launch.Job(TRAINER, WORLD, args, work, extra_env).start(), work, out


def results(out):
    return [torch.load(os.path.join(out, "rank%d.pt" % r)) for r in range(WORLD)]


def tensors_of(res):
    """name -> tensor of the model and the optimizer state."""
    out = {"model." + k: v for k, v in res["model"].items()}
    for i, st in res["optim"]["state"].items():
        for k, v in st.items():
            out["optim.%d.%s" % (i, k)] = v
    return out


class DdpResume(unittest.TestCase):
    def test_killed_job_resumes_bit_exact(self):
        launch.become_subreaper()
        with tempfile.TemporaryDirectory(prefix="dcp-ddp-") as root:
            ckpt = os.path.join(root, "ckpt")
            os.mkdir(ckpt)
            ref, _, ref_out = run("ref", root, "ref", os.path.join(root, "unused"))
            ref.wait(240)

            job, work, _ = run("kill", root, "killed", ckpt)
            marker = lambda: all(os.path.exists(os.path.join(work, "persisted-%d.%d" % (
                KILL_AFTER, r))) for r in range(WORLD))
            launch.wait_for(marker, 240, "the step-%d checkpoint to persist" % KILL_AFTER, job)
            codes = job.kill()
            self.assertEqual(codes, [-9] * WORLD, job.logs())

            res, _, res_out = run("resume", root, "resumed", ckpt)
            res.wait(240)

            want, got = results(ref_out), results(res_out)
            for r in range(WORLD):
                start = got[r]["start"]
                self.assertIn(start, range(KILL_AFTER, STEPS, EVERY), "resumed at %d" % start)
                self.assertEqual(start, got[0]["start"])
                w, g = tensors_of(want[r]), tensors_of(got[r])
                self.assertEqual(sorted(w), sorted(g))
                for k in w:
                    self.assertEqual(w[k].dtype, g[k].dtype, k)
                    diff = (w[k].double() - g[k].double()).abs().max().item()
                    self.assertTrue(torch.equal(w[k], g[k]),
                                    "rank %d: %s differs by up to %g" % (r, k, diff))
                self.assertEqual(want[r]["optim"]["param_groups"], got[r]["optim"]["param_groups"])
                # the losses of every step after the resume, the last included
                for s in range(start, STEPS):
                    self.assertEqual(want[r]["losses"][s], got[r]["losses"][s],
                                     "rank %d step %d" % (r, s))
                self.assertIn(STEPS - 1, got[r]["losses"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
