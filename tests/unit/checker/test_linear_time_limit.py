"""The model check's time limit is a promise: a search too big to finish ends `unknown` within
1 s of the limit, without first spending seconds freeing what it built."""

from __future__ import annotations

import random
import time

from fencecheck.checker.base import Op
from fencecheck.checker.linear import check_linearizable
from fencecheck.checker.linear.search import abandoned, free_abandoned


def crowded_register(n_ops: int, processes: int, seed: int) -> list[Op]:
    """Writes of distinct values by `processes` clients whose ops all overlap, and reads that
    each saw one of them: linearizable, but the search must try a vast number of orders."""
    rng = random.Random(seed)
    ops: list[Op] = []
    events: list[tuple[float, int, int]] = []
    spans = []
    for n in range(n_ops):
        inv = rng.uniform(0, 1)
        ret = inv + rng.uniform(5, 10)
        spans.append((inv, ret))
        events += [(inv, 0, n), (ret, 1, n)]
    events.sort()
    index = {(n, kind): i for i, (_, kind, n) in enumerate(events)}
    for n, (inv, ret) in enumerate(spans):
        f = "write" if n % 2 == 0 else "read"
        value = n if f == "write" else rng.randrange(0, n_ops, 2)
        ops.append(Op(n % processes + processes * (n // processes), f, "ok", index[(n, 0)],
                      int(inv * 1e9), index[(n, 1)], int(ret * 1e9), {"value": value}))
    ops.sort(key=lambda o: o.index)
    return ops


def test_a_search_that_runs_out_ends_unknown_within_a_second_of_the_limit() -> None:
    ops = crowded_register(400, 50, seed=7)
    limit = 2.0
    started = time.monotonic()
    res = check_linearizable(ops, "register", limit)
    elapsed = time.monotonic() - started
    assert res.valid == "unknown"
    assert elapsed < limit + 1.0, f"{elapsed:.2f} s for a {limit} s limit"
    assert abandoned()
    free_abandoned()
    assert not abandoned()
