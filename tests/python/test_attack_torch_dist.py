"""Attacks on dcp.torch at 2 ranks, launched as torchrun launches (the
variables alone, dcp.Context.from_env() over the TCP store): ranks that
disagree on a value, a shape, a dtype or what a key is; a plain tensor
that differs between ranks under check_replicas=True; keys only one rank
has; an async save whose tensors change as soon as it returns. Every
failed save must fail on both ranks and commit nothing. Run: python3
this file."""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launch  # noqa: E402


class Dist(unittest.TestCase):
    def test_two_ranks_that_disagree(self):
        with tempfile.TemporaryDirectory(prefix="dcp-attack-dist-") as tmp:
            launch.Job(os.path.join(HERE, "attack_dist_ranks.py"), 2, [], os.path.join(tmp, "w"),
                       torchrun=True, env={"CKPT": tmp, "TMPDIR": tmp}).start().wait(60)


if __name__ == "__main__":
    unittest.main(verbosity=2)
