"""run/signals.py: a SIGTERM that arrives while the controller starts a thread is raised only
once Thread.start has returned (raised inside it, CPython can undo the new thread's
registration while the thread runs, and prints a KeyError traceback on stderr)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from fencecheck.run.signals import Interrupted, signals_raise


def test_a_signal_during_thread_start_is_raised_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = threading._start_new_thread  # type: ignore[attr-defined]
    calls: list[str] = []
    errors: list[Any] = []

    def start_and_signal(fn: Any, args: Any) -> int:
        ident = real(fn, args)
        calls.append("started")
        os.kill(os.getpid(), signal.SIGTERM)  # lands at the next bytecode, inside start()
        return int(ident)

    monkeypatch.setattr(threading, "_start_new_thread", start_and_signal)
    monkeypatch.setattr(threading, "excepthook", lambda a: errors.append(a))
    t = threading.Thread(target=time.sleep, args=(0.2,))
    with pytest.raises(Interrupted), signals_raise():
        t.start()
        calls.append("start returned")
        for _ in range(1000):  # the signal, sent again, is handled at a bytecode boundary
            time.sleep(0.001)
    t.join(5)
    assert calls[:2] == ["started", "start returned"]
    assert not t.is_alive() and not errors
    assert t not in threading._limbo  # type: ignore[attr-defined]
