"""The belief-mlm probe (BELIEF for masked LMs) on a tiny RANDOM BertForMaskedLM: its numbers mean
nothing; the mechanics (prompts, ranks against a naive forward, vocabulary filter, skipped pairs,
content-free rows, metrics, determinism, errors) are what is tested. No real masked LM can be
installed offline here, so there is no real-model test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from factprobe.errors import ConfigError, ModelError
from factprobe.framework.config import BaseConfig, RunConfig
from factprobe.framework.registry import get_probe
from factprobe.framework.runner import run_probe
from factprobe.models import load_model
from factprobe.probes.belief_mlm import BeliefMLMConfig, single_token_id

CAPITALS = [
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("Canada", "Ottawa"),
    ("Peru", "Lima"),
    ("Narnia", "Xanadu"),
]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(recs) -> str:
    return "".join(json.dumps(r) + "\n" for r in recs)


@pytest.fixture
def toy_root(tmp_path, monkeypatch) -> Path:
    """P36 with 4 templates (LAMA, two ParaRel, one question); P99 with one template (LAMA)."""
    root = tmp_path / "data"
    write(
        root / "lama" / "relations.jsonl",
        jsonl(
            [
                {"relation": "P36", "template": "The capital of [X] is [Y] .", "label": "capital", "type": "1-1"},
                {"relation": "P99", "template": "[X] was born in [Y] .", "label": "born", "type": "N-1"},
            ]
        ),
    )
    write(
        root / "lama" / "trex" / "P36.jsonl",
        jsonl(
            [{"sub_uri": f"Q{i}", "obj_uri": f"Q{100 + i}", "sub_label": s, "obj_label": o} for i, (s, o) in enumerate(CAPITALS)]
        ),
    )
    write(
        root / "lama" / "trex" / "P99.jsonl",
        jsonl(
            [
                {"sub_uri": "Q50", "obj_uri": "Q60", "sub_label": "Albert Einstein", "obj_label": "Ulm"},
                {"sub_uri": "Q51", "obj_uri": "Q61", "sub_label": "Marie Curie", "obj_label": "Warsaw"},
            ]
        ),
    )
    write(
        root / "pararel" / "patterns" / "P36.jsonl",
        jsonl([{"pattern": "[X]'s capital is [Y]."}, {"pattern": "[Y] is the capital of [X] ."}]),
    )
    # common vocabulary without Lima (Peru is filtered out); Xanadu is in it but many tokens for the tiny BERT
    words = ["Paris", "Berlin", "Rome", "Madrid", "Tokyo", "Ottawa", "Xanadu", "Ulm", "Warsaw", "the", "of"]
    write(root / "lama" / "common_vocab_cased.txt", "".join(f"{w}\n" for w in words))
    monkeypatch.setenv("FACTPROBE_DATA", str(root))
    return root


def qa_tsv(tmp_path: Path) -> Path:
    return write(tmp_path / "qa.tsv", "relation\ttemplate\nP36\tWhat is the capital of [X]? [Y]\n")


def config(root: Path, tmp_path: Path, model: Path, **params) -> RunConfig:
    params.setdefault("draws", 300)
    params.setdefault("template_sources", "lama,pararel,belief-qa")  # the toy root has no lpaqa/ (issue 18 item 10)
    params.setdefault("belief_qa_templates", str(qa_tsv(tmp_path)))
    return RunConfig(
        "belief-mlm",
        BaseConfig(model=str(model), source="lama", data=str(root / "lama"), device="cpu", dtype="float32"),
        BeliefMLMConfig(**params),
    )


def test_run_rows_and_metrics(toy_root, tmp_path, tiny_model_path) -> None:
    bert = tiny_model_path("bert")
    out = run_probe(config(toy_root, tmp_path, bert, vocab="common"), tmp_path / "run", progress=False, log=lambda m: None)
    rows = out.results.to_dict("records")
    facts = [r for r in rows if r["row_type"] == "fact"]
    free = [r for r in rows if r["row_type"] == "content_free"]
    # P36: 7 pairs left by the common vocabulary (Peru dropped), 4 templates each; P99: 2 pairs x 1 template
    assert len(facts) == 7 * 4 + 2 and len(free) == 4 + 1
    assert out.metrics["vocab_filter"]["P36"] == {"kept": 7, "not_in_common_vocab": 1}
    prompts = {r["prompt"] for r in facts if r["subject"] == "France"}
    assert prompts == {
        "The capital of France is [MASK].",
        "France's capital is [MASK].",
        "[MASK] is the capital of France.",
        "What is the capital of France? [MASK].",
    }
    narnia = [r for r in facts if r["subject"] == "Narnia"]
    assert len(narnia) == 4 and all(r["skipped"] and r["correct"] is None for r in narnia)
    scored = [r for r in facts if not r["skipped"]]
    for r in scored:
        assert r["correct"] == (r["rank"] == 1) and 1 <= r["rank"] <= r["n_candidates"]
        assert 0 <= r["confidence"] <= r["confidence@10"] <= 1 and len(r["top10"]) == 10
        assert r["prediction"] == r["top10"][0] == r["answer"]
    m = out.metrics
    for k in (
        "acc@1",
        "acc@10",
        "mrr",
        "overconf@1",
        "overconf@10",
        "consist",
        "coverage_avg",
        "coverage_max",
        "coverage_oracle",
        "bias_single",
        "bias_multi",
    ):
        assert m[k] is not None and -1 <= m[k] <= 1, k
    assert m["acc@1"] <= m["acc@10"] and m["coverage_avg"] <= m["coverage_max"] <= m["coverage_oracle"]
    assert m["acc@1_range"] >= 0 and m["acc@1_stdev"] >= 0 and m["n_draws"] == 300
    assert m["n_pairs"] == 6 + 2 and m["n_skipped_pairs"] == 1
    assert set(m["consist_undefined"]) == {"P99"} and m["per_relation"]["P99"]["consist"] is None
    assert [b["n"] for b in m["calibration"]["overconf@1"]] == [3] * 6 + [2] * 4  # 26 prompts, 10 equal-size bins
    assert m["templates_per_relation"] == {"P36": 4, "P99": 1}
    for name in ("belief_templates.parquet", "belief_relations.parquet", "belief_calibration.parquet"):
        assert (tmp_path / "run" / name).is_file()


def test_ranks_match_a_naive_forward(toy_root, tmp_path, tiny_model_path) -> None:
    bert = tiny_model_path("bert")
    out = run_probe(
        config(toy_root, tmp_path, bert, bias=False, vocab="common"), tmp_path / "run", progress=False, log=lambda m: None
    )
    lm = load_model(str(bert), device="cpu", dtype="float32")
    tok = lm.tokenizer
    words = (toy_root / "lama" / "common_vocab_cased.txt").read_text().split()
    cands = sorted({i for i in (single_token_id(tok, w) for w in words) if i is not None})
    rows = [r for r in out.results.to_dict("records") if not r["skipped"]]
    for r in rows[:6]:
        enc = tok(r["prompt"], return_tensors="pt")
        pos = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0]
        with torch.no_grad():
            probs = torch.softmax(lm.model(**enc).logits[0, pos], dim=-1)[cands]
        order = sorted(range(len(cands)), key=lambda j: -float(probs[j]))
        gold = cands.index(single_token_id(tok, r["gold"][0]))
        assert r["rank"] == order.index(gold) + 1
        assert r["confidence"] == pytest.approx(float(probs.max()), abs=1e-5)
        assert r["prediction"] == tok.decode([cands[order[0]]]).strip()


def test_deterministic_and_model_vocab(toy_root, tmp_path, tiny_model_path) -> None:
    bert = tiny_model_path("bert")
    a = run_probe(config(toy_root, tmp_path, bert, vocab="model"), tmp_path / "a", progress=False, log=lambda m: None)
    b = run_probe(config(toy_root, tmp_path, bert, vocab="model"), tmp_path / "b", progress=False, log=lambda m: None)
    keys = ("acc@1", "acc@10", "mrr", "acc@10_range", "acc@10_stdev", "consist", "overconf@1", "bias_multi")
    assert {k: a.metrics[k] for k in keys} == {k: b.metrics[k] for k in keys}
    assert a.results.drop(columns=[]).equals(b.results)
    # every non-special token is a candidate; Peru's Lima is a word of the tiny vocabulary, so it is scored now
    peru = a.results[(a.results["subject"] == "Peru") & (a.results["row_type"] == "fact")]
    assert len(peru) == 4 and peru["skipped"].isna().all()
    assert a.metrics["vocab_filter"] is None
    other = run_probe(
        config(toy_root, tmp_path, bert, vocab="model", draws=300).replace(seed=5),
        tmp_path / "c",
        progress=False,
        log=lambda m: None,
    )
    assert other.metrics["draw_seed"] == 5


def test_max_templates_and_sources(toy_root, tmp_path, tiny_model_path) -> None:
    cfg = config(toy_root, tmp_path, tiny_model_path("bert"), max_templates=2, template_sources="lama,pararel", bias=False)
    probe = get_probe("belief-mlm")
    prepared = probe.prepare(cfg)
    probe.validate(cfg, prepared)
    chosen = prepared.info["belief_mlm_templates"]
    assert len(chosen["P36"]) == 2 and {t["source"] for t in chosen["P36"]} <= {"lama", "pararel"}
    again = probe.prepare(cfg)
    probe.validate(cfg, again)
    assert again.info["belief_mlm_templates"] == chosen  # seeded


def test_refuses_a_tokenizer_without_mask_token(toy_root, tmp_path, tiny_model_path) -> None:
    probe = get_probe("belief-mlm")
    cfg = config(toy_root, tmp_path, tiny_model_path("bert"))
    # a masked LM whose tokenizer declares no mask token
    nomask = tmp_path / "bert-no-mask"
    shutil.copytree(tiny_model_path("bert"), nomask)
    tcfg = json.loads((nomask / "tokenizer_config.json").read_text())
    tcfg.pop("mask_token")
    (nomask / "tokenizer_config.json").write_text(json.dumps(tcfg))
    with pytest.raises(ModelError, match=f"model {nomask}: its tokenizer has no mask token"):
        run_probe(cfg.replace(model=str(nomask)), tmp_path / "n", progress=False, log=lambda m: None)
    assert not (tmp_path / "n" / "run_config.json").exists()  # refused before anything is written
    gpt2 = load_model(str(tiny_model_path("gpt2")), device="cpu", dtype="float32")
    with pytest.raises(ModelError, match="tokenizer has no mask token"):
        probe.check_model(cfg, None, gpt2)
    with pytest.raises(ConfigError, match="accepts masked LMs only"):
        run_probe(cfg.replace(model=str(tiny_model_path("gpt2"))), tmp_path / "g", progress=False, log=lambda m: None)


def test_config_errors() -> None:
    assert BeliefMLMConfig().vocab == "model"  # zhao2024 ranks the model's whole output vocabulary
    with pytest.raises(ConfigError, match="draws=0"):
        BeliefMLMConfig(draws=0)
    with pytest.raises(ConfigError, match="template_sources='lama,wiki'"):
        BeliefMLMConfig(template_sources="lama,wiki")
    with pytest.raises(ConfigError, match="vocab"):
        BeliefMLMConfig(vocab="bert")
