"""`CtrlCNoted`: a Ctrl-C within the block is noted, not raised, and the handler is put back after;
an ignored Ctrl-C stays ignored. Each case in a child interpreter, whose SIGINT it is safe to send."""

from __future__ import annotations

import subprocess
import sys

from helpers.run import riffd_env

CHILD = r"""
import os, signal, sys, time
from riffd.commands.output import CtrlCNoted

if sys.argv[1] == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
with CtrlCNoted() as ctrl_c:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs between two bytecodes: no KeyboardInterrupt is raised

handler = signal.getsignal(signal.SIGINT)
print(ctrl_c.noted, handler is signal.default_int_handler, handler is signal.SIG_IGN)
"""


def _child(mode: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        capture_output=True,
        text=True,
        env=riffd_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_ctrl_c_in_the_block_is_noted_and_the_handler_put_back() -> None:
    assert _child("default") == "True True False"


def test_an_ignored_ctrl_c_stays_ignored() -> None:
    assert _child("ignored") == "False False True"
