"""The handles a `HistoryRecorder` gives out: `OpContext` (one client operation in flight, from
`rec.op(...)`: `ok()`, `fail()` or `info()` completes it, leaving its block without one records
`info`) and `FaultWindow` (a fault the test injects, from `rec.fault(...)`: `start-<f>` on entry,
`stop-<f>` on exit).
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from fencecheck.api.values import _REQUIRED_OK, RecorderError, _check_fields, _encode

if TYPE_CHECKING:
    from fencecheck.api.recorder import HistoryRecorder

_MAX_ERROR = 200  # an exception's text in the history: enough to recognise it, not a traceback


class OpContext:
    """One client operation in flight: `ok(**value)`, `fail(error=..., **value)` or
    `info(error=..., **value)` completes it; leaving the block without one records `info`."""

    __slots__ = ("_entered", "_rec", "_value", "_value_json", "f", "process", "type")

    def __init__(self, rec: HistoryRecorder, process: int, f: str, value_json: str,
                 value: dict[str, Any]) -> None:
        self._rec = rec
        self.process = process
        self.f = f
        self._value_json = value_json
        self._value = value  # the invoke's, for the fields an ok must have somewhere
        self._entered = False
        self.type: Literal["ok", "fail", "info"] | None = None  # set once completed

    def __enter__(self) -> Self:
        if self._entered:
            raise RecorderError(f"process {self.process}: this {self.f} was entered already "
                                "(one `with rec.op(...)` per op)")
        self._rec._begin(self.process, self.f, self._value_json)
        self._entered = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 _tb: TracebackType | None) -> None:
        if self.type is not None:
            return
        if exc is None:
            self._complete("info", "no outcome recorded (neither ok() nor fail() was called)", {})
        else:
            text = str(exc).splitlines()[0] if str(exc) else ""
            error = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
            self._complete("info", error[:_MAX_ERROR], {})

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(exc_type, exc, tb)

    def ok(self, **value: Any) -> None:
        """It happened; `value` adds to the invoke's (`token` of an acquire, `value` of a read)."""
        self._complete("ok", None, value)

    def fail(self, error: str | None = None, **value: Any) -> None:
        """It surely did not happen (a refusal; `error="stale-token"` for a fence's rejection)."""
        self._complete("fail", error, value)

    def info(self, error: str | None = None, **value: Any) -> None:
        """Its outcome is unknown (a timeout). Retires the process id."""
        self._complete("info", error, value)

    def _complete(self, type_: Literal["ok", "fail", "info"], error: str | None,
                  value: dict[str, Any]) -> None:
        if self.type is not None:
            raise RecorderError(f"process {self.process}: {self.f} already completed "
                                f"{self.type}")
        if not self._entered:
            raise RecorderError(f"process {self.process}: {type_}() outside the `with "
                                f"rec.op(...)` block of its {self.f} (it was never invoked)")
        if error is not None and type(error) is not str:
            raise RecorderError(f"process {self.process}: {self.f} {type_}: error must be a "
                                f"string, not {error!r}")
        if value:
            _check_fields(self.process, self.f, value, type_)
        if type_ == "ok" and _REQUIRED_OK[self.f]:
            for name in _REQUIRED_OK[self.f]:
                if name not in value and name not in self._value:
                    raise RecorderError(f"process {self.process}: an ok {self.f} needs {name}= "
                                        "(in the op or in ok())")
        self._rec._end(self.process, self.f, type_, _encode(value) if value else "null", error)
        self.type = type_


class FaultWindow:
    """A fault window: `start-<f>` when the block starts, `stop-<f>` when it ends."""

    __slots__ = ("_rec", "_value_json", "f")

    def __init__(self, rec: HistoryRecorder, f: str, value_json: str) -> None:
        self._rec = rec
        self.f = f
        self._value_json = value_json

    def __enter__(self) -> Self:
        self._rec._nemesis(f"start-{self.f}", self._value_json)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._rec._nemesis(f"stop-{self.f}", "null")

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(self, *_exc: object) -> None:
        self.__exit__()
