"""The published comparison as Markdown (docs/comparison.md), from a finished `fencecheck matrix`
output directory: one line per matrix row with the library, backend, fault, fencing, the row's
expectation, how many seeds found a violation, the violation kinds, the median time to the first
violation, the lost-lock notices' median lead or lag, and whether the row met its expectation.

    python -m fencecheck.reports.markdown store/_matrix/libraries > docs/comparison.md

Several output directories (a matrix run in parts, `--only`) make one table, in the order given;
a row run again in a later directory replaces the earlier run of that row, in its place.

It reads `matrix.json` and each run's `test.json` and `results.json`; it runs nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from msgspec import UNSET

from fencecheck.checker.notices import NAME as NOTICES
from fencecheck.records import matrix as matrix_record
from fencecheck.records import results as results_record
from fencecheck.records import test as test_record
from fencecheck.records.test import RunSettings
from fencecheck.reports.compare import notice_text


@dataclass(frozen=True, slots=True)
class Line:
    row: str
    library: str
    client: str
    backend: str
    fault: str
    fenced: bool
    options: str
    expect: str
    seeds: int
    found: int
    kinds: tuple[str, ...]
    first_s: float | None
    met: bool
    notice: str = "none"  # the lock library's lost-lock notices over the seeds (`notice_text`)


def lines(out_dir: Path) -> list[Line]:
    """One `Line` per row of the matrix output in out_dir (rows whose runs left no test.json
    are reported with what matrix.json knows)."""
    matrix = matrix_record.read(out_dir / "matrix.json")
    out: list[Line] = []
    for row in matrix.rows:
        config: RunSettings | None = None
        library: str | None = None
        kinds: set[str] = set()
        firsts: list[float] = []
        leads: list[int] = []  # every grant's notice lead (ns) over the seeds
        found = notices = 0
        for run in row.runs:
            run_dir = Path(run.run_dir) if run.run_dir else None
            if config is None and run_dir is not None and (run_dir / "test.json").is_file():
                test = test_record.read(run_dir / "test.json")
                config = test.settings
                if test.versions is not UNSET:
                    library = test.versions.get("client")
            results = (results_record.read(run_dir / "results.json") if run_dir is not None
                       and (run_dir / "results.json").is_file() else None)
            if results is not None and (told := results.checks.get(NOTICES)) is not None:
                notices += int(told.extra.get("notices", 0))
                leads += [int(g["lead_ns"]) for g in told.extra.get("per_grant", [])
                          if isinstance(g.get("lead_ns"), int)]
            if run.verdict != "invalid":
                continue
            found += 1
            if results is not None:
                kinds |= results.kinds()
                if (first := results.first_violation_ns) is not None:
                    firsts.append(first / 1e9)
        cfg = config or RunSettings()
        client = "?" if cfg.client is UNSET else cfg.client
        # The client in the comparison's words, as the run recorded them from its descriptor
        # (test.json's versions; runs of earlier releases recorded none: then its name).
        opts = {} if cfg.client_options is UNSET else cfg.client_options
        out.append(Line(
            row=row.row, library=library or client, client=client,
            backend="?" if cfg.backend is UNSET else cfg.backend,
            fault="+".join(cfg.nemesis if cfg.nemesis is not UNSET and cfg.nemesis else ["?"]),
            fenced=cfg.fencing is True,
            options=", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(opts.items())),
            expect=row.expect, seeds=len(row.runs), found=found, kinds=tuple(sorted(kinds)),
            first_s=statistics.median(firsts) if firsts else None, met=row.met,
            # "–": the row's runs did not record notices (`notices` off, the default), which
            # says nothing of whether the library gives any; "none": recorded, and none came
            notice=(notice_text(notices, statistics.median_low(leads) / 1e6 if leads else None)
                    if notices or opts.get("notices", "off") != "off" else "–"),
        ))
    return out


NOTES = """\
## Reading it

- **No token, no fence.** Only `redis-setnx`, `etcd`, `zookeeper` and `pg-advisory-counter` give
  a fencing token; with `--fencing on` the resource rejects every write with a lower token than
  it has seen, which is why their fenced rows find nothing under the same faults.
- **Renewers stop with their process.** python-redis-lock's renewal thread and aioredlock's
  watchdog renew in the background; a paused process pauses them too, the lease runs out, and the
  main thread carries on writing after the pause. Their renewals are not in the history, which
  only makes the checker quieter.
- **python-etcd3 does not renew at all.** Its `Lock` holds a lease of `ttl` whole seconds that
  only `refresh()` extends; a critical section longer than the ttl loses the lock with no fault.
  The partition rows' sections (4 writes 700 ms apart) outlast its 1 s ttl, so what the etcd3
  partition row finds would be found without the partition too.
- **An advisory lock lives with its session.** A paused holder's kernel still answers TCP
  keepalives, so PostgreSQL keeps the session and the lock for the whole pause (nothing found
  without `idle_session_timeout`). A holder cut off from PostgreSQL but not from the resource
  loses the lock once the server's keepalive gives up (about a lease plus a second), and goes
  on writing.
- **Not in the table:** `clock` on etcd (Go reads the clock through the vDSO; the shim cannot
  move it) and on postgres-advisory (PostgreSQL is not run under the shim), `kill` on
  postgres-advisory (no restart on its data here): both are refused up front; `clock` on
  kubernetes (kube-apiserver and etcd are Go binaries): the `client-clock` rows move the
  clients' clocks instead.
- **A careless client with a fence** still hands the lock out twice (its double-grant rows are
  the lock's failure), but the resource rejects every stale write: its fenced rows find
  double-grant and nothing else.
- **client-go's release can empty the successor's Lease.** With `ReleaseOnCancel` the elector
  releases whenever it stops. Its release (client-go v0.37.2) reads the Lease, decides by the
  record it last *observed*, and writes an empty holder with the resourceVersion it has just
  read, which the API server accepts; a third candidate can then take the Lease while the second
  still leads. That happens only when the release runs before the woken elector has read the
  successor's record: the pause landed while a renew was running (the renew's deadline passes
  during the pause, it fails on waking without a read, and the elector gives up), or the elector
  is cancelled before its first read after the pause returns. A holder paused between renewals
  reads the Lease on waking, sees its successor and writes nothing. The read came with
  kubernetes/kubernetes PR #132849 (fixing issue #131867); before it, the release wrote with the
  last resourceVersion the elector had seen, and the API server would have refused it with a
  conflict. Fenced by resourceVersion, no stale write gets through: its fenced pause row finds
  double-grant only; the client records the elector's Lease writes, and the checker ties a
  double grant to the release's write (13 of 13 in the run the findings page shows). See
  [findings/client-go-release.md](findings/client-go-release.md).
- **Consul: lock-delay is what keeps a paused holder's successor waiting.** The Go `api.Lock`
  renews its session in the background; paused past the session's TTL (a server waits up to
  twice it), the holder loses the key, and with lock-delay 0 the next holder takes it at once,
  so the resumed holder's write lands after its successor's. Consul's default lock-delay (15 s)
  keeps the key from everyone for longer than these pauses: nothing found. The api cannot ask
  for lock-delay 0 (a zero `LockDelay` is left out of the request and the server applies 15 s):
  the rows ask for 1 ms. The token is the key's ModifyIndex, not its LockIndex, which starts
  again at 1 when the key is deleted. See [findings/consul.md](findings/consul.md).
- **`consul lock`'s child writes on while its holder is cut off from the servers.** It watches
  the key with a blocking query that nothing times out; the servers give the lock to another
  holder (its session's 2 x 15 s TTL and 15 s lock-delay later) while the child keeps writing,
  until the cut heals. Short pauses never reach its fixed 15 s session.
- **ShedLock's unlock is unchecked** with the client's clock (both the Redis and the JDBC
  provider): a runner paused past lockAtMostFor frees the next runner's lock. With
  `usingDbTime()` the JDBC provider's unlock checks `locked_by`, a host name, not a grant.
"""


def latest(rows: Sequence[Line]) -> list[Line]:
    """One line per row name: the last one given, where the first one stood."""
    last = {r.row: r for r in rows}
    seen: set[str] = set()
    out: list[Line] = []
    for r in rows:
        if r.row not in seen:
            seen.add(r.row)
            out.append(last[r.row])
    return out


def render(rows: Sequence[Line], source: str) -> str:
    met = sum(r.met for r in rows)
    out = [
        "# Lock libraries compared",
        "",
        f"Generated by `python -m fencecheck.reports.markdown` from a run of `{source}` "
        "(`fencecheck matrix`) on this project's 2-core test machine, shared with other runs; "
        "every row ran each of its "
        "seeds once. **found** is how many seeds' runs found a violation; **kinds** are the "
        "violation kinds over those runs; **first** is the median time from the start of a run "
        "to its first violation; **notice** is when the library told its holders that the "
        "lock was lost (lost-lock notices), as the median over the seeds' grants of the "
        "notice's lead before the grant's surely-held end (a lag: after it), none when the "
        "row recorded notices and none came, – when the row does not record them "
        "(`--client-opt notices`, off by default). A "
        "must-find row expects every seed to find one, a must-pass row expects none.",
        "",
        f"{met} of {len(rows)} rows met their expectation.",
        "",
        "| library (client) | backend | fault | fenced | expect | found | kinds | first | notice "
        "| met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        client = f"{r.library} (`{r.client}`" + (f", {r.options}" if r.options else "") + ")"
        first = f"{r.first_s:.1f} s" if r.first_s is not None else "–"
        out.append(
            f"| {client} | {r.backend} | {r.fault} | {'yes' if r.fenced else 'no'} | {r.expect} "
            f"| {r.found}/{r.seeds} | {', '.join(r.kinds) or '–'} | {first} | {r.notice} "
            f"| {'met' if r.met else '**MISSED**'} |"
        )
    return "\n".join(out) + "\n\n" + NOTES


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fencecheck.reports.markdown",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("out_dirs", type=Path, nargs="+", metavar="OUT_DIR",
                    help="a `fencecheck matrix --out` directory")
    ap.add_argument("--source", default="examples/libraries.toml",
                    help="the matrix file named in the heading")
    args = ap.parse_args(argv)
    rows: list[Line] = []
    for out_dir in args.out_dirs:
        if not (out_dir / "matrix.json").is_file():
            print(f"error: {out_dir}/matrix.json: not found (run `fencecheck matrix` first)",
                  file=sys.stderr)
            return 3
        try:
            rows += lines(out_dir)
        except (OSError, ValueError, KeyError) as e:
            print(f"error: {out_dir}: unreadable matrix output ({e})", file=sys.stderr)
            return 3
    sys.stdout.write(render(latest(rows), args.source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
