"""The JSON Schemas of the tool's contract: results.json, test.json, matrix.json,
schedule.json, shard.json and one history.jsonl line.

`fencecheck schema results|test|matrix|schedule|shard|history` prints them (and `config`, a
run's configuration with every installed owner's options, which fencecheck.run.options
derives); the tests validate every file the tool produces against them. Each is derived from
its reader: the files' from their record types (fencecheck.records, by msgspec; the results'
with the installed checks' violation kinds as examples), the history line's from its record
(fencecheck.records.history) with the checker's table of values (checker.reader.line_schema), so
a schema and the code that reads its file cannot drift apart.
"""

from __future__ import annotations

from typing import Any


def schema(name: str) -> dict[str, Any]:
    """One of NAMES ("history" is one line of history.jsonl); KeyError for another name."""
    if name == "results":
        from fencecheck.records import results

        return _with_kinds(results.schema())
    if name == "test":
        from fencecheck.records import test

        return test.schema()
    if name == "matrix":
        from fencecheck.records import matrix

        return matrix.schema()
    if name == "shard":
        from fencecheck.records import shard

        return shard.schema()
    if name == "schedule":
        from fencecheck.records import schedule

        return schedule.schema()
    if name == "history":
        from fencecheck.checker.reader import line_schema

        return line_schema()
    raise KeyError(name)


NAMES = ("results", "test", "matrix", "schedule", "shard", "history")


def _with_kinds(doc: dict[str, Any]) -> dict[str, Any]:
    """The results schema with the installed checks' violation kinds as the examples of a
    violation's `kind` (not an enum: results of a check no longer installed still validate)."""
    from fencecheck.checker import registry

    kind = doc.get("$defs", {}).get("Violation", {}).get("properties", {}).get("kind")
    if isinstance(kind, dict):
        kind["examples"] = [k.name for k in registry.kinds()]
        kind["description"] = "the kind of violation: one of a check's kinds " \
            "(`fencecheck plugins` lists them with their checks)"
    return doc
