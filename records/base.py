"""What every record shares: `RecordError`, strict decoding with the field named, the JSON
encoding the files are written in, and the generated JSON Schema."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

T = TypeVar("T")

# Where the file formats are described, for the generated schemas (the package ships no docs;
# the project's Documentation URL in pyproject.toml)
DOCS = "https://github.com/fencecheck/fencecheck/blob/main/docs"


class RecordError(ValueError):
    """A record file that is not as specified; one line naming the file and the field (the CLI
    exits 3 on it where the user gave the file)."""


def _field_error(e: msgspec.ValidationError, at: str = "") -> str:
    """msgspec's "Expected `int`, got `str` - at `$.config.seed`" as "config.seed: expected
    `int`, got `str`"."""
    text = str(e)
    what, sep, where_at = text.rpartition(" - at `")
    if not sep:
        return (f"{at}: " if at else "") + text[:1].lower() + text[1:]
    field = ".".join(p for p in (at, where_at.rstrip("`").removeprefix("$").removeprefix("."))
                     if p) or "(top level)"
    return f"{field}: {what[:1].lower()}{what[1:]}"


def decode_json(data: bytes | str, where: str) -> Any:
    """The JSON document in data, untyped; RecordError if it is not JSON."""
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise RecordError(f"{where}: not valid JSON: {e}") from None


def convert(doc: Any, type_: type[T], where: str, at: str = "") -> T:
    """doc (decoded JSON) as type_, strictly (no string for a number, no number for a bool);
    `at` is doc's place in its file (`config`), put before the field an error names."""
    try:
        return msgspec.convert(doc, type_, strict=True)
    except msgspec.ValidationError as e:
        raise RecordError(f"{where}: {_field_error(e, at)}") from None


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise RecordError(f"{path}: cannot read: {e.strerror or e}") from None


def encode_json(doc: Any) -> bytes:
    """The files' layout: two-space indent and a final newline, as `json.dumps(indent=2)`."""
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


def write_atomic(path: Path, data: bytes | str) -> None:
    """A rename of a new file made in path's folder: a reader never sees half a record, and a
    link in the record's place (or beside it) is replaced, never written through."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def decode_object(data: bytes | str, type_: type[T], where: str, fmt: int) -> T:
    """A record file whose document is one object of type_ carrying an optional
    `format_version` (absent: format fmt); RecordError naming the field otherwise."""
    doc = decode_json(data, where)
    if not isinstance(doc, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    rec = convert(doc, type_, where)
    version = getattr(rec, "format_version", msgspec.UNSET)
    if version is not msgspec.UNSET and version != fmt:
        raise RecordError(f"{where}: format_version {version}: this fencecheck reads format "
                          f"{fmt}")
    return rec


class RecordFile(Generic[T]):
    """A record's file operations from its decode and encode: `read` (RecordError naming the
    path) and `write` (atomic)."""

    def __init__(self, decode: Callable[[bytes | str, str], T],
                 encode: Callable[[T], bytes]) -> None:
        self._decode, self._encode = decode, encode

    def read(self, path: Path) -> T:
        return self._decode(read_bytes(path), str(path))

    def write(self, path: Path, rec: T) -> None:
        write_atomic(path, self._encode(rec))


def schema_of(type_: Any, title: str, description: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of a record type, generated from it."""
    s: dict[str, Any] = msgspec.json.schema(type_)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title,
            "description": description, **s}
