"""`check_history`: the one function that owns the verdict.

`run`, `check`, `report` and `matrix` all call it, so one history gets one verdict everywhere.
It reads a history (a file in any supported format, a run directory, or event dicts), runs the
lock checks (checker.analyze), the model check where asked for or where the locks carry no lease,
and groups violations into incidents. A verdict of VALID needs at least one check that could
judge: a history with no client operations, or one where every check had to skip, is unknown,
with `--model` too. Bad input raises `CheckerError` (exit 3).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fencecheck.checker.base import NEMESIS, CheckerError, CheckResult, Event, Op, Results, combine

log = logging.getLogger(__name__)

HISTORY_FILE = "history.jsonl"
NO_CLIENT_OPS = "the history has no client operations (it is empty or holds only nemesis events)"

Source = str | Path | Iterable[Mapping[str, Any]]


def _events_from_dicts(items: Iterable[Mapping[str, Any]]) -> list[Op]:
    from fencecheck.checker.history import pair
    from fencecheck.checker.reader import line_from_dict

    events: list[Event] = []
    for line, d in enumerate(items, 1):
        e = line_from_dict(d, "<events>", line)
        events.append(e)
    return pair(events, "<events>")


def load(source: Source, fmt: str | None = None) -> list[Op]:
    """The paired ops of a history file, a run directory or an iterable of event dicts."""
    where = str(source) if isinstance(source, str | Path) else "<events>"
    try:
        if isinstance(source, str | Path):
            path = Path(source)
            if path.is_dir():
                path = path / HISTORY_FILE
            from fencecheck.checker.formats import load_any

            return load_any(path, fmt)
        return _events_from_dicts(source)
    except CheckerError:
        raise
    except UnicodeDecodeError as e:
        raise CheckerError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise CheckerError(f"{where}: nested too deeply to read") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as e:
        # a reader that trips over input it did not foresee: still bad input, said in one line
        log.debug("reading %s", where, exc_info=True)
        raise CheckerError(f"{where}: cannot read the history ({type(e).__name__}: {e})") from None


def leaseless_locks(ops: Sequence[Op]) -> bool:
    """Every acquire lacks a lease: the lease-aware checks cannot judge these locks."""
    acquires = [op for op in ops if op.f == "acquire"]
    return bool(acquires) and all(op.get("lease_ms") is None for op in acquires)


def _no_client_ops(ops: Sequence[Op]) -> Results:
    from fencecheck.checker.registry import always_run

    checks = {n: CheckResult(n, True, skipped=NO_CLIENT_OPS) for n in always_run()}
    nemesis = sum(1 for op in ops if op.process == NEMESIS)
    return Results("unknown", checks, {"ops": len(ops), "nemesis_ops": nemesis,
                                       "unknown_reason": NO_CLIENT_OPS, "incidents": 0})


def judge(ops: Sequence[Op], *, max_drift: float = 0.01, model: str | None = None,
          time_limit_s: float | None = None) -> Results:
    """The verdict on already-paired ops (see check_history)."""
    if not isinstance(max_drift, int | float) or not math.isfinite(max_drift) \
            or not 0 <= max_drift < 1:
        raise CheckerError(f"max_drift must be a number in [0, 1), not {max_drift!r}")
    if time_limit_s is not None and not (math.isfinite(time_limit_s) and time_limit_s > 0):
        raise CheckerError(f"time limit must be a positive number of seconds, not {time_limit_s!r}")
    if not any(op.process != NEMESIS for op in ops):
        return _no_client_ops(ops)
    from fencecheck.checker.analyze import analyze

    results = analyze(ops, max_drift=max_drift)
    st = results.stats
    if "acquire_ops" in st:  # counted while building the grant table
        leaseless = st["acquire_ops"] > 0 and st["acquires_with_lease"] == 0
    else:
        leaseless = leaseless_locks(ops)
    if model is None and leaseless:
        model = "mutex"  # without leases only the model check can judge the locks
        results.stats["model_chosen"] = "mutex (the locks have no leases)"
    if model is not None:
        from fencecheck.checker.linear import check_linearizable

        try:
            lin = check_linearizable(ops, model, time_limit_s)
        except CheckerError:
            raise
        except Exception as e:  # a crashed check reads as unknown, never as a pass
            log.exception("the linearizability check crashed")
            lin = CheckResult("linearizable", "unknown",
                              details={"error": f"{type(e).__name__}: {e}"})
        results.checks["linearizable"] = lin
        verdict = combine(list(results.checks.values()))
        if verdict is True and all(c.skipped is not None for c in results.checks.values()):
            verdict = "unknown"  # a model that judged nothing cannot make a thin history valid
        results.valid = verdict
    if results.valid == "unknown" and "unknown_reason" not in results.stats:
        skipped = [c for c in results.checks.values() if c.skipped is not None]
        if len(skipped) == len(results.checks):
            results.stats["unknown_reason"] = "every check had to skip: " + "; ".join(
                f"{c.name}: {c.skipped}" for c in skipped)
        else:
            results.stats["unknown_reason"] = "a check could not decide: " + ", ".join(
                c.name for c in results.checks.values() if c.valid == "unknown")
    return results


def check_history(source: Source, *, max_drift: float = 0.01, model: str | None = None,
                  fmt: str | None = None, time_limit_s: float | None = None) -> Results:
    """The verdict on a history. `source` is a history file (JSONL, EDN or Jepsen log; `fmt`
    names it or it is guessed), a run directory (its history.jsonl), or an iterable of event
    dicts as history.jsonl lines hold them. `model` adds the linearizability check with that
    model (chosen as "mutex" when no lock has a lease); `time_limit_s` bounds it, after which
    it is unknown. Raises CheckerError on bad input or options."""
    ops = load(source, fmt)
    return judge(ops, max_drift=max_drift, model=model, time_limit_s=time_limit_s)
