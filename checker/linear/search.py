"""The Wing & Gong linearizability search with Lowe's memoization, as Porcupine does it.

One history (of one partition) becomes a doubly linked list of call and return entries in history
order. The search walks it: at a call it tries to linearize that op now (apply the model's step;
if legal and the pair (set of linearized ops, new state) was never reached before, lift the op's
entries out of the list and restart from the head); at a return of an op not yet linearized it has
gone too far, and backtracks. The list, the stack and the cache are plain ints and tuples: the
linearized set is an int used as a bitset, and states are hashable, so a configuration is one
tuple in a set. Unlike Porcupine, the cache stores the set shifted past its fully linearized
prefix, so memory grows with the number of configurations, not with that times the history's
length.

Indeterminate ops have no return entry: they may be linearized at any point after their call, or
never, and the search succeeds once every definite op is linearized. A deadline turns an unfinished
search into "unknown", never into a pass.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from fencecheck.checker.linear.models import ILLEGAL, Call, Model

_CHECK_EVERY: Final = 4096  # iterations between deadline checks
# What searches that ran out of time built: freeing a memo set of millions of configurations
# takes seconds (one deallocation each), which would break the time limit's promise, so it is
# kept here instead. `free_abandoned()` frees it when a caller can afford the time; the CLI
# exits without freeing it at all.
_ABANDONED: list[Any] = []


def abandoned() -> bool:
    """Whether a search that ran out of time left its memo set behind."""
    return bool(_ABANDONED)


def free_abandoned() -> None:
    _ABANDONED.clear()


@dataclass(frozen=True, slots=True)
class Entry:
    """One op of a partition, as the search sees it. Positions order all entries in time."""

    call: Call
    optional: bool
    call_pos: int
    return_pos: int | None  # None for an optional op


@dataclass(frozen=True, slots=True)
class SearchResult:
    """`order`: a full linearization (valid) or the longest linearizable prefix found before the
    search failed (positions into the entries list). `failed`: the op whose return the search
    could never get past (the latest point where every candidate order died), `state`: the model
    state after `order`."""

    valid: bool | Literal["unknown"]
    order: tuple[int, ...]
    failed: int | None
    state: Any
    explored: int


def search(model: Model, entries: Sequence[Entry], deadline: float | None) -> SearchResult:
    """Is there an order of `entries` that respects real time and that `model` accepts?"""
    n = len(entries)
    remaining = sum(1 for e in entries if not e.optional)
    if remaining == 0:
        return SearchResult(True, (), None, model.init, 0)

    # Nodes: 0 is the head, 1..m the entries in history order, m + 1 the tail.
    events: list[tuple[int, int, int]] = []  # (position, is_return, op)
    for i, e in enumerate(entries):
        events.append((e.call_pos, 0, i))
        if e.return_pos is not None:
            if e.return_pos <= e.call_pos:
                raise ValueError(f"op {i} returns at {e.return_pos}, before its call")
            events.append((e.return_pos, 1, i))
    events.sort()
    m = len(events)
    tail = m + 1
    nxt = [*range(1, m + 2), tail]
    prv = [0, *range(0, m + 1)]
    node_op = [-1] * (m + 2)
    is_call = [False] * (m + 2)
    match = [-1] * (m + 2)  # call node -> its return node, -1 for optional ops
    call_node = [0] * n
    for node, (_, is_return, op) in enumerate(events, start=1):
        node_op[node] = op
        if is_return:
            match[call_node[op]] = node
        else:
            is_call[node] = True
            call_node[op] = node

    calls = [e.call for e in entries]
    optional = [e.optional for e in entries]
    # Definite and optional ops are numbered apart, each in call order, and each set is its own
    # bitset. Definite ops all get linearized eventually, so the definite set is stored in the
    # cache shifted past its lowest unlinearized op `low` (every lower bit is 1): configurations
    # stay a few words long however long the history. An optional op may stay out forever,
    # which would pin `low`; hence its own, usually tiny, set.
    # The bit masks are made when used: a table of 1 << i for every op is quadratic in size.
    number: list[int] = []
    n_def = n_opt = 0
    for e in entries:
        if e.optional:
            number.append(n_opt)
            n_opt += 1
        else:
            number.append(n_def)
            n_def += 1
    step = model.step
    seen: set[tuple[int, int, int, Any]] = set()
    # The stack is a linked list of (call node, state before it, rest) cells, so the deepest
    # configuration can be remembered by reference instead of by copying the stack.
    path: Any = None
    state: Any = model.init
    lin = 0  # definite ops linearized
    olin = 0  # optional ops linearized
    low = 0  # lowest definite number not in lin
    deepest = -1
    best_path: Any = None
    best_state: Any = state
    ticks = 0

    node = nxt[0]
    while True:
        ticks += 1
        if deadline is not None and ticks % _CHECK_EVERY == 0 and time.monotonic() > deadline:
            _ABANDONED.append((seen, path, best_path))
            return SearchResult("unknown", (), None, model.init, len(seen))
        if is_call[node]:
            op = node_op[node]
            new_state = step(state, calls[op])
            if new_state is not ILLEGAL:
                if optional[op]:
                    new_lin, new_olin, new_low = lin, olin | (1 << number[op]), low
                else:
                    new_lin, new_olin = lin | (1 << number[op]), olin
                    new_low = low
                    if number[op] == low:
                        new_low = ((new_lin + 1) & ~new_lin).bit_length() - 1
                key = (new_low, new_lin >> new_low, new_olin, new_state)
                if key not in seen:
                    seen.add(key)
                    path = (node, state, path)
                    state = new_state
                    lin, olin, low = new_lin, new_olin, new_low
                    # lift: unlink the call, then its return (unlift relinks in reverse order)
                    p, q = prv[node], nxt[node]
                    nxt[p] = q
                    prv[q] = p
                    r = match[node]
                    if r >= 0:
                        p, q = prv[r], nxt[r]
                        nxt[p] = q
                        prv[q] = p
                    if not optional[op]:
                        remaining -= 1
                        if remaining == 0:
                            order = _unwind(path, node_op)
                            return SearchResult(True, order, None, state, len(seen))
                    node = nxt[0]
                    continue
            node = nxt[node]
            continue
        # A return of an op not linearized yet (or the tail): this branch is dead.
        if node > deepest and node != tail:
            deepest = node
            best_path = path
            best_state = state
        if path is None:
            break
        node, state, path = path
        op = node_op[node]
        if optional[op]:
            olin ^= 1 << number[op]
        else:
            lin ^= 1 << number[op]
            remaining += 1
            if number[op] < low:
                low = number[op]
        r = match[node]
        if r >= 0:
            nxt[prv[r]] = r
            prv[nxt[r]] = r
        nxt[prv[node]] = node
        prv[nxt[node]] = node
        node = nxt[node]

    order = _unwind(best_path, node_op)
    failed = node_op[deepest] if deepest > 0 else None
    return SearchResult(False, order, failed, best_state, len(seen))


def _unwind(path: Any, node_op: list[int]) -> tuple[int, ...]:
    """The ops of a stack, bottom first."""
    out: list[int] = []
    while path is not None:
        out.append(node_op[path[0]])
        path = path[2]
    out.reverse()
    return tuple(out)
