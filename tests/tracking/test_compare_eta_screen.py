"""Issue 37 item 6: the two-run `compare` screen shows the relation-mean eta that wu2024's Table 1
uses ("average subsumption rate ... over the relations") beside the pooled one. Hand-computed case:
relation R1, A knows 4 facts and B 1 of them (eta(A|B) = 1/4); relation R2, A knows 1 fact, B knows it
(eta 1). Pooled over facts: 2/5 = 0.400; mean over the 2 relations: (0.25 + 1) / 2 = 0.625."""

import pandas as pd
import pytest

from factprobe.metrics.comparison import compare_runs
from factprobe_ops.tracking.compare import format_comparison


def _tables():
    a = [("R1", 1)] * 4 + [("R1", 0)] * 2 + [("R2", 1)] + [("R2", 0)] * 3
    b = [1, 0, 0, 0, 1, 1, 1, 0, 0, 0]
    df_a = pd.DataFrame(
        {"fact_id": [f"f{i}" for i in range(10)], "relation": [r for r, _ in a], "correct": [bool(c) for _, c in a]}
    )
    df_b = df_a.assign(correct=[bool(c) for c in b])
    return df_a, df_b


def test_relation_mean_eta_beside_the_pooled_one():
    res = compare_runs(*_tables(), n_boot=50)
    assert res["eta_relation_mean_a_given_b"] == pytest.approx(0.625)
    assert res["eta_pooled_a_given_b"] == pytest.approx(0.4)
    assert res["eta_relations_a_given_b"] == 2
    text = format_comparison(res, "a", "b")
    line = next(x for x in text.splitlines() if x.startswith("subsumption eta(A|B)"))
    assert "0.625 mean over 2 relations (wu2024 Table 1)" in line
    assert "0.400 pooled over facts" in line
    assert line.index("0.625") < line.index("0.400")  # the paper's first
    assert any(x.startswith("subsumption eta(B|A)") and "mean over" in x and "pooled" in x for x in text.splitlines())
