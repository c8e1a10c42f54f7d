"""The JSON Schemas of the tool's contract: results.json, test.json, matrix.json and one
history.jsonl line.

`fencecheck schema results|test|matrix|history` prints them; the tests validate every file the
tool produces against them. Each is derived from its reader: the three files' from their record
types (fencecheck.records, by msgspec), the history line's from its record
(fencecheck.records.history) with the checker's table of values (checker.reader.line_schema), so
a schema and the code that reads its file cannot drift apart.
"""

from __future__ import annotations

from typing import Any


def schema(name: str) -> dict[str, Any]:
    """One of NAMES ("history" is one line of history.jsonl); KeyError for another name."""
    if name == "results":
        from fencecheck.records import results

        return results.schema()
    if name == "test":
        from fencecheck.records import test

        return test.schema()
    if name == "matrix":
        from fencecheck.records import matrix

        return matrix.schema()
    if name == "history":
        from fencecheck.checker.reader import line_schema

        return line_schema()
    raise KeyError(name)


NAMES = ("results", "test", "matrix", "history")
