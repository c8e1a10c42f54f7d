"""The Debian mirror is read from the machine's own apt sources, one-line and deb822 alike, so
debootstrap fetches from the user's mirror (a proxy, an offline copy), not a hard-coded one."""

from __future__ import annotations

from pathlib import Path

from fencecheck.clusters.runtimes.apt_sources import DEFAULT_MIRROR, debian_mirror, sources

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example.org/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example.org/debian-security
Suites: bookworm-security
Components: main
"""


def _apt(tmp: Path, files: dict[str, str]) -> Path:
    (tmp / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (tmp / name).write_text(text)
    return tmp


def test_a_deb822_source_gives_its_mirror(tmp_path: Path) -> None:
    apt = _apt(tmp_path, {"sources.list.d/debian.sources": DEB822})
    assert debian_mirror("bookworm", apt) == "http://mirror.example.org/debian"


def test_a_one_line_source_with_options_gives_its_mirror(tmp_path: Path) -> None:
    apt = _apt(tmp_path, {"sources.list": (
        "# a comment\n"
        "deb-src http://src.example.org/debian bookworm main\n"
        "deb http://sec.example.org/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://proxy.local:3142/debian bookworm main c\n")})
    assert debian_mirror("bookworm", apt) == "http://proxy.local:3142/debian"


def test_apt_order_disabled_stanzas_and_other_suites(tmp_path: Path) -> None:
    apt = _apt(tmp_path, {
        "sources.list.d/a.sources": "Types: deb\nURIs: http://off.example/debian\n"
                                    "Suites: bookworm\nComponents: main\nEnabled: no\n",
        "sources.list.d/b.list": "deb http://node.example/node nodistro main\n",
        "sources.list.d/c.sources": DEB822,
        "sources.list.d/d.list.disabled": "deb http://never.example/debian bookworm main\n",
    })
    assert [s.uri for s in sources(apt)] == ["http://node.example/node",
                                             "http://mirror.example.org/debian/",
                                             "http://mirror.example.org/debian-security"]
    assert debian_mirror("bookworm", apt) == "http://mirror.example.org/debian"
    assert debian_mirror("trixie", apt) == DEFAULT_MIRROR


def test_no_sources_at_all_is_the_debian_default(tmp_path: Path) -> None:
    assert debian_mirror("bookworm", tmp_path / "none") == DEFAULT_MIRROR
