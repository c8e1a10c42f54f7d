"""Text from a history or a user (a lock name, a path, an error string) made safe to show: every
control character (C0, DEL, C1) and every invisible or direction-changing one (zero-width
spaces and joiners, bidi embeddings, overrides and isolates, line and paragraph separators)
becomes a visible escape (`\\x1b`, `\\u202e`), so it can neither drive a terminal nor reorder
or hide what a reader sees. The CLI (fencecheck/cli/group.py) and the HTML reports use it."""

from __future__ import annotations

import re

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return repr(c)[1:-1] if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def visible(text: str) -> str:
    """`text` with its unsafe characters as escapes; unchanged when it has none."""
    return UNSAFE.sub(_escape, text)
