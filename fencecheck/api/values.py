"""What the history recorder writes and what it refuses: `RecorderError`, the client op names
(`ClientF`, `CLIENT_FS`), each op's fields and the test of each value (`FIELDS`, from
checker.reader's table, so the recorder refuses what the checker's strict reader would),
`_check_fields`, and the compact JSON encoder (`_encode`: NaN, infinities and other non-JSON
values refused as RecorderError). `fencecheck.api.recorder` and `fencecheck.api.ops` use them.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable
from typing import Any, Final, Literal

from fencecheck.checker.reader import VALUES

ClientF = Literal["acquire", "renew", "release", "read", "write"]
CLIENT_FS: frozenset[str] = frozenset(("acquire", "renew", "release", "read", "write"))


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)
_c_encode = json.encoder.c_make_encoder  # type: ignore[attr-defined]


def _make_encode() -> Callable[[Any], str]:
    """JSON text of a value, compact; the C encoder called directly (it is most of an op's
    recording cost, and `JSONEncoder.encode` adds a third on top of it)."""
    if _c_encode is None:
        return _encoder.encode
    chunks = _c_encode(None, _encoder.default, json.encoder.encode_basestring, None, ":", ",",
                       False, False, False)  # allow_nan=False: NaN is not JSON

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


_json_encode = _make_encode()


def _encode(value: Any) -> str:
    """JSON text of a value, or RecorderError saying why it has none."""
    try:
        return _json_encode(value)
    except ValueError as e:  # NaN or an infinity (allow_nan=False), or a circular value
        raise RecorderError(f"not JSON: {e} ({_nonfinite(value) or 'a circular value'})") \
            from None
    except TypeError as e:
        raise RecorderError(f"not JSON: {e}") from None
    except RecursionError:
        raise RecorderError("not JSON: nested too deeply") from None


def _nonfinite(value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        for k, x in value.items():
            if (what := _nonfinite(x)) is not None:
                return f"{k}={what}"
    if isinstance(value, list | tuple):
        for x in value:
            if (what := _nonfinite(x)) is not None:
                return what
    return None


# f -> field -> (what it must be, its test) from the checker's table; reads and writes carry the
# resource's own `value` too (any JSON)
_ANY: Final = ("any JSON value", lambda _x: True)
FIELDS: Final[dict[str, dict[str, tuple[str, Callable[[Any], bool]]]]] = {
    f: {**{name: (kind[0], kind[1]) for name, (kind, _) in spec.items()},
        **({"value": _ANY} if f in ("read", "write") else {})}
    for f, spec in VALUES.items()
}
_TESTS: Final = {f: {name: test for name, (_, test) in spec.items()} for f, spec in FIELDS.items()}
_REQUIRED: Final = {f: tuple(n for n, (_, req) in spec.items() if req == "always")
                    for f, spec in VALUES.items()}
_REQUIRED_OK: Final = {f: tuple(n for n, (_, req) in spec.items() if req == "ok")
                       for f, spec in VALUES.items()}


def _check_fields(process: int, f: str, value: dict[str, Any], where: str) -> None:
    """RecorderError for a field `f` does not have, or a value its check cannot use."""
    tests = _TESTS[f]
    if value.keys() <= tests.keys():  # the usual case, in as few steps as it can be
        for name, x in value.items():
            if not tests[name](x):
                break
        else:
            return
    fields = FIELDS[f]
    for name, x in value.items():
        spec = fields.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, fields, n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]}=?)" if close else ""
            raise RecorderError(f"process {process}: {f} {where}: unknown field {name}={hint}; "
                                f"{_an(f)} has {', '.join(fields)}")
        if not spec[1](x):
            raise RecorderError(f"process {process}: {f} {where}: {name} must be {spec[0]}, "
                                f"not {x!r}")


def _an(f: str) -> str:
    return f"an {f}" if f[0] in "aeiou" else f"a {f}"


class RecorderError(ValueError):
    """A misuse of the recorder: an op on a busy or retired process, an op completed twice, a
    bad process id or op name, or recording after close()."""


def _process_json(process: int | str) -> str:
    return str(process) if type(process) is int else _encode(process)
