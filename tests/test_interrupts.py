"""tracehouse.interrupts inside one process (issue 36 item 2): a held block runs whole and the signal comes
after it. The ingest's interrupts are sent as real signals to the CLI by tests/test_kill.py."""

from __future__ import annotations

import os
import signal

import pytest

from tracehouse.interrupts import held, watching


def test_a_held_block_runs_whole_and_the_signal_comes_after():
    done = []
    with pytest.raises(KeyboardInterrupt), watching():
        with held():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("after the signal")
        done.append("not reached")
    assert done == ["after the signal"]
