"""Unit tests of reports.figures: label escaping, bin widths, the partition drawing."""

from __future__ import annotations

import pytest

from fencecheck.reports.figures import bin_width, esc, partition_drawing


def test_esc_escapes_markup_and_shortens() -> None:
    assert esc('<b>"x"</b>') == "&lt;b&gt;&quot;x&quot;&lt;/b&gt;"
    assert esc({"k": "<i>"}) == "{&quot;k&quot;: &quot;&lt;i&gt;&quot;}"
    assert len(esc("x" * 1000)) == 201


@pytest.mark.parametrize(
    ("duration_s", "width"), [(0.0, 0.001), (1.0, 0.01), (30.0, 0.5), (600.0, 5), (3600.0, 30)]
)
def test_bin_width_is_round(duration_s: float, width: float) -> None:
    assert bin_width(duration_s) == width


def test_partition_drawing_classifies_links() -> None:
    d = partition_drawing(
        {"shape": "one-node", "grudge": {"n1": ["n2", "c1"], "n2": ["n1"], "n3": []}}
    )
    assert d is not None
    assert [n["name"] for n in d["nodes"]] == ["c1", "n1", "n2", "n3"]
    kinds = {
        (a["name"], b["name"]): link["kind"]
        for link in d["links"]
        for a in d["nodes"]
        for b in d["nodes"]
        if (a["x"], a["y"]) == link["a"] and (b["x"], b["y"]) == link["b"]
    }
    assert kinds[("n1", "n2")] == "cut"
    assert kinds[("c1", "n1")] == "one-way"
    assert kinds[("c1", "n2")] == "ok" and kinds[("n2", "n3")] == "ok"
    assert len(d["links"]) == 6
    assert partition_drawing({"targets": ["c1"]}) is None
    assert partition_drawing(None) is None


def test_the_nemesis_lane_names_each_faults_target() -> None:
    from fencecheck.reports.timeline import Window
    from fencecheck.reports.timeline_plot import fault_annotations

    windows = [Window("pause", 1.0, 2.0, 5, True, {"targets": ["c5"], "paused": ["c5"]}),
               Window("partition", 3.0, 4.0, 9, True, {"shape": "majority", "grudge": {}}),
               Window("clock", 5.0, 6.0, 12, False, None)]
    assert [(a["x"], a["y"], a["text"]) for a in fault_annotations(windows)] == [
        (1.0, 0, "pause c5"), (3.0, 0, "partition majority"), (5.0, 0, "clock")]
