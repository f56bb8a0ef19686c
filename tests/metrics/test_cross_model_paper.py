"""The cross-model maps say what wu2024 says (issue 29 item 4): Figure 5's order, eta as the relation
mean first (Tables 1 and 10), families by lineage only with --model-meta, and fine-tuned models kept
out of the size pairs and the within-family Pearson mean. Hand-computed small cases."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from factprobe.metrics.cross_model import eta_pairs, family_correlation, figure5_order
from factprobe.report.cross_model_maps import FAMILIES_BY_ARCHITECTURE, Aligned, RunFacts, build_maps, format_maps
from factprobe.report.model_meta import ModelMeta


def test_figure5_orders_families_by_their_model_closest_to_7b_and_models_by_accuracy():
    families = {"a": "F1", "b": "F1", "c": "F1", "d": "F2", "e": "F2"}
    sizes = {"a": 1e9, "b": 6.7e9, "c": 13e9, "d": 7e9, "e": 2e9}
    acc = {"a": 0.5, "b": 0.3, "c": 0.6, "d": 0.4, "e": 0.7, "x": 0.9, "y": 0.1}
    # F1's model closest to 7B is b (0.3), F2's is d (0.4): F2 first although F1 has the larger models;
    # within each family by accuracy, best first; no family last, by accuracy
    assert figure5_order(["a", "b", "c", "y", "d", "e", "x"], families, sizes, acc) == ["e", "d", "c", "a", "b", "x", "y"]
    # closest in parameters (the paper's footnote speaks of a gap in parameters): 2B (5B away) beats 13B (6B away)
    fam2 = {"s": "G", "t": "G"}
    assert figure5_order(
        ["t", "s", "u"], {**fam2, "u": "H"}, {"s": 2e9, "t": 13e9, "u": 7e9}, {"s": 0.2, "t": 0.9, "u": 0.5}
    ) == ["u", "t", "s"]  # G ranks by s (0.2) < H's u (0.5)


def _t(known: set[str], facts: list[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame([(f, r, f in known) for f, r in facts], columns=["fact_id", "relation", "correct"])


FACTS = [("f1", "R1"), ("f2", "R1"), ("f3", "R2"), ("f4", "R2"), ("f5", "R3"), ("f6", "R3")]
# per relation: base R1 1/2 R2 1/2 R3 0; chat R1 1 R2 0 R3 1/2; big R1 1 R2 1 R3 1/2
KNOWN = {"base": {"f1", "f3"}, "chat": {"f1", "f2", "f5"}, "big": {"f1", "f2", "f3", "f4", "f5"}}


def _maps(source: str):
    tables = {m: _t(k, FACTS) for m, k in KNOWN.items()}
    aligned = Aligned(tables=tables, runs={m: RunFacts(model=m, table=t, ref=m) for m, t in tables.items()}, n_facts=len(FACTS))
    metas = {
        "base": ModelMeta("base", "F", 1e9, None, source),
        "chat": ModelMeta("chat", "F", 1e9, "base", source),
        "big": ModelMeta("big", "F", 7e9, None, source),
    }
    return build_maps(aligned, metas).result


def test_a_fine_tuned_model_is_in_no_size_pair_and_no_within_family_mean():
    res = _maps("meta file meta.yaml")
    assert list(res["eta"]) == ["base vs big"]  # never "chat vs big": chat is fine-tuned
    assert list(res["base_vs_finetuned"]) == ["chat vs base"]
    fc = res["family_correlation"]
    assert fc["n_within"] == 1 and fc["within"] == pytest.approx(res["pearson"]["base"]["big"])
    assert any("fine-tuned model(s) chat" in n for n in res["notes"])
    # the metric functions on their own: a model fine-tuned from a base outside the runs is still left out
    tables = {m: _t(k, FACTS) for m, k in KNOWN.items()}
    pairs = eta_pairs(tables, {m: "F" for m in tables}, {"base": 1e9, "chat": 2e9, "big": 7e9}, finetuned={"chat"})
    assert list(pairs) == ["base vs big"]
    r = pd.DataFrame([[1.0, 0.5, 0.2], [0.5, 1.0, 0.9], [0.2, 0.9, 1.0]], index=list("abc"), columns=list("abc"))
    out = family_correlation(r, {"a": "F", "b": "F", "c": "G"}, finetuned={"b"})
    assert (out["n_within"], out["n_across"]) == (0, 2) and math.isnan(out["within"])
    assert out["across"] == pytest.approx((0.2 + 0.9) / 2)


def test_the_console_shows_the_relation_mean_eta_first_and_the_pooled_one_labelled():
    res = _maps("meta file meta.yaml")
    eta = res["eta"]["base vs big"]
    # base knows f1 (R1), f3 (R2); big knows both: relation mean over R1, R2 = 1, pooled 2/2 = 1. chat | base: chat
    # knows f1, f2, f5; base f1: R1 1/2, R3 0 -> relation mean 1/4; pooled 1/3
    assert eta["relation_mean"] == pytest.approx(1.0) and eta["pooled"] == pytest.approx(1.0)
    text = format_maps(res)
    assert "base vs big: eta 1.000 (pooled over facts 1.000;" in text
    assert "eta(fine-tuned | base) 0.250 mean over relations, as Table 10 (pooled over facts 0.333)" in text
    assert FAMILIES_BY_ARCHITECTURE not in text and res["families_by"] == "lineage"


def test_without_model_meta_the_console_says_families_are_by_architecture():
    res = _maps("config /models/x")
    assert res["families_by"] == "architecture" and FAMILIES_BY_ARCHITECTURE in format_maps(res)
    assert res["order"] == ["big", "chat", "base"]  # one family: by average accuracy (5/6, 1/2, 1/3)
