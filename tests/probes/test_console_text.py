"""What the terminal says after a probe run (issue 22 item 3): QA names the k of its headline,
counterfactual prints its Figure-7 table, and the multiple-choice table and the report call the
gold option's probability mass `prob_mass`, as metrics.json and MLflow do."""

from factprobe.framework.registry import get_probe
from factprobe.probes.mc import format_relation_table
from factprobe.report.html import accuracy_summary_html, accuracy_summary_markdown

QA = {"em": 0.2, "f1": 0.25, "contains": 0.3, "n": 30, "shots": [0]}


def test_qa_headline_names_its_k():
    assert get_probe("qa").headline(QA) == "em 0.200, f1 0.250, contains 0.300 over 30 items at k=0"
    two = get_probe("qa").headline({**QA, "shots": [3, 10]})
    assert two.endswith("over 30 items at k=3 (k=10: in the table above)")  # every k is on screen (issue 37 item 6)


def _figure7_metrics() -> dict:
    rows = [
        {"setting": s, "shots": k, "shots_used": min(k, 6), "em": em, "f1": em, "contains": em, "n": 5}
        for s, base in (("known-unshuffle", 0.4), ("known-shuffle", 0.2), ("unknown-unshuffle", 0.1), ("unknown-shuffle", 0.0))
        for k, em in ((0, base), (8, base + 0.2))
    ]
    return {**QA, "figure7": rows, "regular": {"em": 0.2, "shots_used": 4}, "shots_note": "known-unshuffle@8: only 6"}


def test_counterfactual_prints_figure7_em_per_setting_and_k():
    probe = get_probe("counterfactual")
    text = probe.relation_text(_figure7_metrics())
    lines = text.splitlines()
    assert lines[0] == "Figure 7: EM per setting and k (evaluation split, n = 5 per cell)"
    assert lines[1].split() == ["setting", "k=0", "k=8"]
    assert lines[2].split() == ["known-unshuffle", "0.400", "0.600*"]  # 6 of 8 exemplars fitted
    assert lines[5].split() == ["unknown-shuffle", "0.000", "0.200*"]
    assert lines[6] == "* known-unshuffle@8: only 6"
    assert probe.relation_text({"em": 0.1}) is None
    assert probe.headline(_figure7_metrics()).endswith("over 30 items (regular exemplars, k=4)")


MC = {
    "accuracy": 0.5,
    "accuracy_ci": [0.2, 0.8],
    "macro_accuracy": 0.5,
    "prob_mass": 0.31,
    "n": 4,
    "per_relation": {"P36": {"accuracy": 0.5, "accuracy_ci": [0.2, 0.8], "prob_mass": 0.31, "n": 4}},
}


def test_screen_and_report_say_prob_mass():
    for text in (format_relation_table(MC), accuracy_summary_markdown({"run": MC}), accuracy_summary_html({"run": MC})):
        assert "prob_mass" in text and "gold prob" not in text
