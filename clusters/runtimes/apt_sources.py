"""The Debian mirror this machine's apt uses, read from its sources (one-line `.list` files and
deb822 `.sources` files, in the order apt reads them), so that what fencecheck fetches with
debootstrap (the docker runtime's base image, benchmarks/bench_fresh_apt.sh) comes from the
user's own mirror: behind a proxy or offline with a local mirror, deb.debian.org may be
unreachable. `python3 -m fencecheck.clusters.runtimes.apt_sources [SUITE]` prints it.

Standard library only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MIRROR = "http://deb.debian.org/debian"
APT = Path("/etc/apt")


@dataclass(frozen=True, slots=True)
class Source:
    """One `deb` source: where, which suites, which components."""

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]


def _one_line(text: str) -> Iterator[Source]:
    """`deb [opt=val ...] URI SUITE COMPONENT...` lines of a .list file."""
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # options, possibly several words
            while words and not words[0].endswith("]"):
                words.pop(0)
            words = words[1:]
        if len(words) >= 2:
            yield Source(words[0], (words[1],), tuple(words[2:]))


def _deb822(text: str) -> Iterator[Source]:
    """The stanzas of a .sources file (fields Types, URIs, Suites, Components, Enabled)."""
    stanza: dict[str, str] = {}
    last = ""
    for raw in [*text.splitlines(), ""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if "deb" in stanza.get("types", "").split() and \
                    stanza.get("enabled", "yes").strip().lower() != "no":
                for uri in stanza.get("uris", "").split():
                    yield Source(uri, tuple(stanza.get("suites", "").split()),
                                 tuple(stanza.get("components", "").split()))
            stanza, last = {}, ""
        elif raw[0] in " \t" and last:  # a continuation line
            stanza[last] += " " + raw.strip()
        elif ":" in raw:
            key, _, value = raw.partition(":")
            last = key.strip().lower()
            stanza[last] = value.strip()


def sources(root: Path = APT) -> list[Source]:
    """Every `deb` source, in apt's order: sources.list, then sources.list.d/ by name."""
    out: list[Source] = []
    files = [root / "sources.list", *sorted((root / "sources.list.d").glob("*"))]
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        if f.suffix == ".sources":
            out.extend(_deb822(text))
        elif f.suffix == ".list" or f.name == "sources.list":
            out.extend(_one_line(text))
    return out


def debian_mirror(suite: str = "bookworm", root: Path = APT) -> str:
    """The first source with `suite` itself (not -updates or -security) and `main`: this
    machine's Debian mirror; deb.debian.org where there is none."""
    for s in sources(root):
        if suite in s.suites and "main" in s.components and \
                s.uri.startswith(("http://", "https://", "file:/")):
            return s.uri.rstrip("/")
    return DEFAULT_MIRROR


if __name__ == "__main__":
    print(debian_mirror(sys.argv[1] if len(sys.argv) > 1 else "bookworm"))
