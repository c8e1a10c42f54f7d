"""Sequential models for the linearizability search: mutex, owner-mutex, fenced-mutex, register,
cas-register.

A model is pure data plus functions, after Porcupine's Init/Step/Equal: `init` is the first state,
`step(state, call)` returns the next state or `ILLEGAL`, and states are hashable immutable values
whose `==` is the model's equality (so the search can cache them). `encode` turns one `Op` into the
compact `call` tuple the step function reads, once, before the search; it returns None for an op
that tells this model nothing (another f, a `fail`, an indeterminate read). `partition` names the
independent object an op touches (a lock or a key), so each object is searched on its own.

How indeterminate (`info`) ops are handled: the encoded call is marked optional and the search may
linearize it anywhere after its invoke, or never. Its step is the step of a successful op, since
"it happened" means it succeeded (an acquire that took effect took a free lock).

Leases are outside these models: a lock is judged as if a grant lasted until its release, the way
Knossos judges Jepsen lock tests. The lease-aware checks live in checker/history.py.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Final

from fencecheck.checker.base import NEMESIS, Op

ILLEGAL: Final = object()
"""What `step` returns when the op cannot happen in that state."""

# Op kinds inside call tuples; small ints so the step functions compare cheaply.
ACQUIRE: Final = 0
RELEASE: Final = 1
HOLD: Final = 2  # a renew that succeeded: the lock was held (by this process) at that moment
READ: Final = 3
WRITE: Final = 4
CAS: Final = 5

Call = tuple[Any, ...]
Encoded = tuple[Call, bool]  # (call, optional)


@dataclass(frozen=True, slots=True)
class Model:
    """A sequential specification. See the module docstring for the contract of each part."""

    name: str
    init: Hashable
    step: Callable[[Any, Call], Any]
    encode: Callable[[Op], Encoded | None]
    partition: Callable[[Op], str]
    describe_state: Callable[[Any], str]
    subject: str  # "lock" or "key": what a partition is, for violations


def freeze(value: Any) -> Hashable:
    """Lists (Jepsen vectors) and dicts become tuples, so values can live in hashable states."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, set | frozenset):
        return frozenset(freeze(v) for v in value)
    return value  # type: ignore[no-any-return]


# --- locks -----------------------------------------------------------------------------------

_LOCK_FS: Final = {"acquire": ACQUIRE, "release": RELEASE, "renew": HOLD}


def _lock_kind(op: Op) -> tuple[int, bool] | None:
    """(kind, optional) for a lock op the models must place, None for one they can ignore."""
    kind = _LOCK_FS.get(op.f)
    if kind is None or op.process == NEMESIS or op.type == "fail":
        return None
    if op.type == "info":
        # An indeterminate renew neither changes the lock nor proves anything about it.
        return None if kind == HOLD else (kind, True)
    return kind, False


def _lock_partition(op: Op) -> str:
    return str(op.get("lock", "lock"))


def _mutex_encode(op: Op) -> Encoded | None:
    k = _lock_kind(op)
    return None if k is None else ((k[0],), k[1])


def _mutex_step(held: bool, call: Call) -> Any:
    kind = call[0]
    if kind == ACQUIRE:
        return ILLEGAL if held else True
    if kind == RELEASE:
        return False if held else ILLEGAL
    return held if held else ILLEGAL


def _owner_encode(op: Op) -> Encoded | None:
    k = _lock_kind(op)
    return None if k is None else ((k[0], op.process), k[1])


def _owner_step(holder: Any, call: Call) -> Any:
    kind, process = call
    if kind == ACQUIRE:
        return process if holder is None else ILLEGAL
    if holder is None or holder != process:
        return ILLEGAL
    return None if kind == RELEASE else holder


def _fenced_encode(op: Op) -> Encoded | None:
    k = _lock_kind(op)
    if k is None:
        return None
    token = op.get("token") if op.ok else None
    return (k[0], op.process, token if isinstance(token, int) else None), k[1]


def _fenced_step(state: tuple[Any, int | None], call: Call) -> Any:
    holder, top = state
    kind, process, token = call
    if kind == ACQUIRE:
        if holder is not None:
            return ILLEGAL
        if token is None:
            # The grant's token is unknown but exceeds `top`; the smallest such token constrains
            # later grants least, and the search only needs one witness.
            return (process, None if top is None else top + 1)
        if top is not None and token <= top:
            return ILLEGAL
        return (process, token)
    if holder is None or holder != process:
        return ILLEGAL
    return (None, top) if kind == RELEASE else state


def _describe_mutex(held: bool) -> str:
    return "the lock is held" if held else "the lock is free"


def _describe_owner(holder: Any) -> str:
    return "the lock is free" if holder is None else f"process {holder} holds the lock"


def _describe_fenced(state: tuple[Any, int | None]) -> str:
    holder, top = state
    who = "the lock is free" if holder is None else f"process {holder} holds the lock"
    return who if top is None else f"{who} and the highest token granted is {top}"


# --- registers -------------------------------------------------------------------------------


def _register_partition(op: Op) -> str:
    return str(op.get("key", "register"))


def _register_encode(op: Op) -> Encoded | None:
    if op.process == NEMESIS or op.type == "fail":
        return None
    if op.f == "read":
        # An indeterminate read returned nothing to check.
        return None if op.type == "info" else ((READ, freeze(op.get("value"))), False)
    if op.f == "write":
        return (WRITE, freeze(op.get("value"))), op.type == "info"
    return None


def _register_step(value: Any, call: Call) -> Any:
    kind, arg = call
    if kind == WRITE:
        return arg
    return value if value == arg else ILLEGAL


def _cas_encode(op: Op) -> Encoded | None:
    if op.f != "cas":
        return _register_encode(op)
    # A failed cas did not happen (Jepsen and Knossos semantics). Porcupine's etcd model reads
    # it as an observation that the register did not hold `from`; that stronger reading turns
    # Knossos's valid mongodb-v0-ack-rollback histories invalid, whose cas fails are not all
    # compare failures.
    if op.process == NEMESIS or op.type == "fail":
        return None
    return (CAS, freeze(op.get("from")), freeze(op.get("to"))), op.type == "info"


def _cas_step(value: Any, call: Call) -> Any:
    kind = call[0]
    if kind == WRITE:
        return call[1]
    if kind == READ:
        return value if value == call[1] else ILLEGAL
    return call[2] if value == call[1] else ILLEGAL


def _describe_register(value: Any) -> str:
    return "the register is empty" if value is None else f"the register holds {value!r}"


MODELS: Final[dict[str, Model]] = {
    m.name: m
    for m in (
        Model("mutex", False, _mutex_step, _mutex_encode, _lock_partition, _describe_mutex, "lock"),
        Model(
            "owner-mutex", None, _owner_step, _owner_encode, _lock_partition, _describe_owner,
            "lock",
        ),
        Model(
            "fenced-mutex", (None, None), _fenced_step, _fenced_encode, _lock_partition,
            _describe_fenced, "lock",
        ),
        Model(
            "register", None, _register_step, _register_encode, _register_partition,
            _describe_register, "key",
        ),
        Model(
            "cas-register", None, _cas_step, _cas_encode, _register_partition,
            _describe_register, "key",
        ),
    )
}
