"""The JSON Schemas of the tool's contract: results.json and one history.jsonl line.

`fencecheck schema results|history` prints them; the tests validate every results.json and
history the tool produces against them. The history line's schema is derived from the reader
(checker.reader.line_schema), so the two cannot drift apart. Bump `FORMAT_VERSION`
(checker.base) with any change a reader of results.json must know about.
"""

from __future__ import annotations

from typing import Any

from fencecheck.checker.base import FORMAT_VERSION

_NAT = {"type": "integer", "minimum": 0}
_NS_OR_NULL = {"type": ["integer", "null"], "minimum": 0}
_TOKEN = {"type": ["integer", "null"]}
_PROCESS = {"anyOf": [{"type": "integer"}, {"const": "nemesis"}]}
_VERDICT = {"enum": [True, False, "unknown"]}

RESULTS: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "fencecheck results.json",
    "description": "The verdict on one history (fencecheck DESIGN.md, Checks). Times are integer "
                   "ns since the run started; every time field's name ends in _ns.",
    "type": "object",
    "required": ["format_version", "tool_version", "valid", "incidents", "checks", "stats"],
    "properties": {
        "format_version": {"const": FORMAT_VERSION},
        "tool_version": {"type": "string"},
        "valid": _VERDICT,
        "incidents": {"type": "array", "items": {"$ref": "#/$defs/incident"}},
        "checks": {"type": "object", "additionalProperties": {"$ref": "#/$defs/check"}},
        "stats": {"type": "object"},
    },
    "$defs": {
        "op": {
            "description": "An operation in the history, by its invoke",
            "type": "object",
            "required": ["process", "index", "time_ns", "token"],
            "properties": {
                "process": _PROCESS, "index": _NAT, "time_ns": _NAT, "token": _TOKEN,
                "f": {"type": "string"}, "end_index": _NS_OR_NULL,
            },
        },
        "violation": {
            "type": "object",
            "required": ["kind", "ops", "explanation"],
            "properties": {
                "kind": {"type": "string"},
                "lock": {"type": "string"},
                "key": {"type": "string"},
                "ops": {"type": "array", "items": {"$ref": "#/$defs/op"}},
                "explanation": {"type": "string"},
                "time_ns": _NAT,
                "incident": {"type": "integer", "minimum": 1},
            },
        },
        "check": {
            "type": "object",
            "required": ["valid", "violations"],
            "properties": {
                "valid": _VERDICT,
                "violations": {"type": "array", "items": {"$ref": "#/$defs/violation"}},
                "skipped": {"type": "string"},
                "count": _NAT,
            },
        },
        "grant": {
            "type": "object",
            "required": ["process", "index", "token", "ok_time_ns"],
            "properties": {"process": _PROCESS, "index": _NAT, "token": _TOKEN,
                           "ok_time_ns": _NAT, "surely_held_end_ns": _NS_OR_NULL},
        },
        "incident": {
            "type": "object",
            "required": ["id", "lock", "stale_grant", "fault", "next_grant", "violations",
                         "kinds", "story"],
            "properties": {
                "id": {"type": "integer", "minimum": 1},
                "lock": {"type": "string"},
                "stale_grant": {"allOf": [{"$ref": "#/$defs/grant"},
                                          {"required": ["surely_held_end_ns"]}]},
                "fault": {"anyOf": [{"type": "null"}, {
                    "type": "object",
                    "required": ["f", "start_time_ns", "end_time_ns", "value"],
                    "properties": {"f": {"type": "string"}, "start_time_ns": _NAT,
                                   "end_time_ns": _NS_OR_NULL},
                }]},
                "next_grant": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/grant"}]},
                "violations": {"type": "array", "items": {
                    "type": "object", "required": ["check", "n"],
                    "properties": {"check": {"type": "string"}, "n": _NAT}}},
                "kinds": {"type": "array", "items": {"type": "string"}},
                "story": {"type": "string"},
            },
        },
    },
}


def schema(name: str) -> dict[str, Any]:
    """"results" or "history" (one line of history.jsonl); KeyError for another name."""
    if name == "results":
        return RESULTS
    if name == "history":
        from fencecheck.checker.reader import line_schema

        return line_schema()
    raise KeyError(name)


NAMES = ("results", "history")
