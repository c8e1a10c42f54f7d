"""`fencecheck doctor` on a machine set up by scripts/setup.sh: everything required is there,
and each item, Docker and SSH included, is reported with what was found."""

from __future__ import annotations

from fencecheck.cli.doctor import Finding, _binary
from tests.conftest import run_fencecheck


def test_doctor_passes_on_a_set_up_machine_and_names_each_prerequisite() -> None:
    r = run_fencecheck("doctor", timeout=120)
    assert r.returncode == 0, r.stdout
    for item in ("iproute2", "iptables", "redis", "etcd", "zookeeper", "postgresql", "sshd",
                 "docker"):
        assert item in r.stdout, item


def test_a_missing_binary_comes_with_the_command_that_fixes_it() -> None:
    f = _binary("frobnicator", "no-such-binary-fc", "frob-pkg")
    assert f == Finding("frobnicator", False, "no-such-binary-fc not found",
                        "apt-get update && apt-get install -y frob-pkg")
