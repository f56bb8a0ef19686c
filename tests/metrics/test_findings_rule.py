"""The verdict line's own fields (issue 37 item 5): unit, n in that unit, method and the per-relation sign count."""

from __future__ import annotations

from factprobe.metrics import findings_rule as fr


def test_finding_carries_unit_n_method_and_signs_and_renders_them():
    f = fr.Finding(
        "ic-lke>=mmp",
        "m",
        fr.INCONCLUSIVE,
        0.02,
        (-0.01, 0.05),
        240,
        {},
        unit="relations",
        n_units=12,
        method="t-interval over relation means",
        signs="9 of 12 relations the claimed way",
    )
    d = f.to_dict()
    assert (d["unit"], d["n_units"], d["method"], d["signs"]) == (
        "relations",
        12,
        "t-interval over relation means",
        "9 of 12 relations the claimed way",
    )
    line = fr.verdict_text(d)
    assert line.startswith("inconclusive") and "12 relations" in line
    assert "t-interval over relation means" in line and "9 of 12 relations the claimed way" in line
    table = fr.markdown_table([d])
    assert "| 12 relations | t-interval over relation means | 9 of 12 relations the claimed way |" in table


def test_old_callers_get_unit_and_n_from_detail():
    d = fr.Finding("saturation", "m", fr.HOLDS, 0.1, (0.05, 0.2), 3, {"unit": "draws"}).to_dict()
    assert (d["unit"], d["n_units"], d["method"], d["signs"]) == ("draws", 3, None, None)
    assert fr.verdict_text(d) == "holds (3 draws)"
    assert "| 3 draws | n/a | n/a |" in fr.markdown_table([d])
