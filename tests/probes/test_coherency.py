"""The coherency probe (youssef2024, Algorithm 1).

Hand-worked toy tables use a scripted scorer (no model) so that the outcome of every step is known:
the exclusion rule and partial match decide them. The runner tests use a tiny RANDOM llama (its
numbers mean nothing; only the mechanics are tested) and one test uses the real SmolLM2."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from factprobe.errors import ConfigError
from factprobe.framework.base import Session
from factprobe.framework.checkpoint import CHECKPOINT, RESULTS
from factprobe.framework.config import BaseConfig, RunConfig
from factprobe.framework.registry import get_probe
from factprobe.framework.runner import run_probe
from factprobe.probes.coherency import CoherencyConfig, build_query, split_template

BORN = {"relation": "P19", "template_obj": "[X] was born in [Y]", "template_sub": "[Y] is the birth place of [X]"}
ROW_FIELDS = {
    "key",
    "fact_id",
    "relation",
    "cardinality",
    "subject",
    "gold",
    "round",
    "first_prediction",
    "second_prediction",
    "first_correct",
    "coherent",
    "context",
    "second_context",
    "excluded",
    "first_score",
    "first_gold_score",
    "first_gold_rank",
    "first_candidates",
    "second_score",
    "second_candidates",
    "second_gold_rank",
}


def write_jsonl(path: Path, recs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def fact(s, o, sid, oid, rel="P19", **kw):
    return {"subject": s, "relation": rel, "object": o, "subject_id": sid, "object_id": oid, **kw}


class ScriptedScorer:
    """Scores (context, candidate) from a table; everything else gets -50. Ties keep label order."""

    tokenizer = SimpleNamespace(bos_token="<s>", eos_token="</s>")

    def __init__(self, table: dict[tuple[str, str], float]):
        self.table = table
        self.requests = []

    def score_choices(self, requests, shared_prefix=None):
        self.requests += list(requests)
        return [np.array([self.table.get((r.context, o.strip()), -50.0) for o in r.options]) for r in requests]


def run_toy(tmp_path, test, scores, train=None, templates=(BORN,), **params):
    """Score every item of a toy dataset with the scripted scorer; {key: row}."""
    data = write_jsonl(tmp_path / "facts.jsonl", test)
    train_dir = None
    if train:
        train_dir = tmp_path / "train"
        write_jsonl(
            train_dir / "P19.jsonl", [{"sub_label": s, "obj_label": o, "sub_uri": si, "obj_uri": oi} for s, o, si, oi in train]
        )
    tfile = write_jsonl(tmp_path / "templates.jsonl", list(templates))
    cfg = RunConfig(
        "coherency",
        BaseConfig(source="triples", data=str(data), train_data=train_dir and str(train_dir)),
        CoherencyConfig(coherency_templates=str(tfile), **params),
    )
    probe = get_probe("coherency")
    prepared = probe.prepare(cfg)
    probe.validate(cfg, prepared)
    scorer = ScriptedScorer(scores)
    session = Session(cfg, None, prepared, lambda m: None, _engines={"scorer": scorer})
    rows = []
    for rel, items in prepared.items.items():
        rows += probe.score_batch(session, probe.open_relation(session, rel), items)
    return {r["key"]: r for r in rows}, scorer


# ------------------------------------------------------------------ hand-worked toys
SHARED_PARIS = {
    ("Alice was born in", "Paris"): -1.0,
    ("Alice was born in", "Rome"): -3.0,
    # step 2 of round 1 prefers Bob, who is ALSO born in Paris: without the exclusion S' = Bob
    ("Paris is the birth place of", "Bob"): -1.0,
    ("Paris is the birth place of", "Alice"): -2.0,
    ("Paris is the birth place of", "Carol"): -3.0,
}


def test_exclusion_decides_round_1(tmp_path):
    """An object shared by two subjects: predicting the subject back from Paris, Bob (also born in
    Paris) is excluded, so the model's second-best, Alice, is its answer: coherent."""
    test = [fact("Alice", "Paris", "Q1", "Q90"), fact("Bob", "Paris", "Q2", "Q90"), fact("Carol", "Rome", "Q3", "Q60")]
    rows, _ = run_toy(tmp_path, test, SHARED_PARIS)
    r = rows["P19|Q1|Q90#r1"]
    assert (r["first_prediction"], r["first_correct"]) == ("Paris", True)
    assert r["second_context"] == "Paris is the birth place of" and r["excluded"] == ["Bob"]
    assert (r["second_prediction"], r["coherent"]) == ("Alice", True)
    assert r["second_candidates"] == 2 and r["first_candidates"] == 2
    # the exclusion is what decided it: over ALL subjects Bob scores highest
    assert max(["Alice", "Bob", "Carol"], key=lambda s: SHARED_PARIS[("Paris is the birth place of", s)]) == "Bob"


def test_exclusion_is_by_entity_id_not_label(tmp_path):
    """Bob is known (from the training file) to be born in the same entity Q90, spelled "Paris, France"
    there: excluded by id. If his "Paris, France" is another entity (Q91), he is not correct for
    Q90, stays a candidate and wins: incoherent. Labels alone would give the same for both."""
    test = [fact("Alice", "Paris", "Q1", "Q90"), fact("Carol", "Rome", "Q3", "Q60")]
    same, _ = run_toy(tmp_path / "a", test, SHARED_PARIS, train=[("Bob", "Paris, France", "Q2", "Q90")])
    assert same["P19|Q1|Q90#r1"]["excluded"] == ["Bob"] and same["P19|Q1|Q90#r1"]["coherent"] is True
    other, _ = run_toy(tmp_path / "b", test, SHARED_PARIS, train=[("Bob", "Paris, France", "Q2", "Q91")])
    r = other["P19|Q1|Q90#r1"]
    assert r["excluded"] == [] and (r["second_prediction"], r["coherent"]) == ("Bob", False)
    # a gold subject whose label another, excluded entity shares stays a candidate
    test2 = [fact("Alice", "Paris", "Q1", "Q90"), fact("Alice", "Paris", "Q7", "Q90"), fact("Carol", "Rome", "Q3", "Q60")]
    rows, _ = run_toy(tmp_path / "c", test2, SHARED_PARIS)
    assert rows["P19|Q1|Q90#r1"]["second_prediction"] == "Alice" and rows["P19|Q1|Q90#r1"]["excluded"] == []


def test_exclusion_decides_round_2_for_n_m(tmp_path):
    """Alice was born in Paris and (N-M) in Lyon; round 2 starts from Paris. Back from the predicted
    subject Alice, her other correct object Lyon is excluded, so Paris is predicted: coherent. Step 1
    excludes nothing: in round 1 Lyon is predicted and counts as correct."""
    test = [fact("Alice", "Paris", "Q1", "Q90"), fact("Alice", "Lyon", "Q1", "Q456"), fact("Carol", "Rome", "Q3", "Q60")]
    scores = {
        ("Paris is the birth place of", "Alice"): -1.0,
        ("Paris is the birth place of", "Carol"): -2.0,
        ("Alice was born in", "Lyon"): -1.0,
        ("Alice was born in", "Paris"): -2.0,
        ("Alice was born in", "Rome"): -3.0,
        ("Lyon is the birth place of", "Alice"): -1.0,
    }
    rows, scorer = run_toy(tmp_path, test, scores)
    assert set(rows) == {"P19|Q1|Q90#r1", "P19|Q1|Q90#r2", "P19|Q3|Q60#r1", "P19|Q3|Q60#r2"}  # one item per subject
    r2 = rows["P19|Q1|Q90#r2"]
    assert (r2["context"], r2["first_prediction"], r2["first_correct"]) == ("Paris is the birth place of", "Alice", True)
    assert r2["second_context"] == "Alice was born in" and r2["excluded"] == ["Lyon"]
    assert (r2["second_prediction"], r2["coherent"]) == ("Paris", True) and r2["second_gold_rank"] == 1
    r1 = rows["P19|Q1|Q90#r1"]
    assert (r1["first_prediction"], r1["first_correct"], r1["first_candidates"]) == ("Lyon", True, 3)
    assert (r1["second_prediction"], r1["coherent"]) == ("Alice", True)
    assert r1["gold_objects"] == ["Paris", "Lyon"] and r1["gold"] == "Paris"
    # every step-1 query of the batch went in one call, every step-2 query in a second one
    assert [r.context for r in scorer.requests[:4]] == [
        "Alice was born in",
        "Paris is the birth place of",
        "Carol was born in",
        "Rome is the birth place of",
    ]


def test_partial_match_decides(tmp_path):
    """Predicting "Alice" back for the subject "Alice Smith" is coherent (containment); a first
    prediction "Rome, Italy" (another entity) for the gold "Rome" is counted correct."""
    test = [
        fact("Alice Smith", "Paris", "Q1", "Q90"),
        fact("Alice", "Rome", "Q5", "Q60"),
        fact("Zed", "Rome, Italy", "Q7", "Q61"),
    ]
    scores = {
        ("Alice Smith was born in", "Paris"): -1.0,
        ("Paris is the birth place of", "Alice"): -1.0,
        ("Paris is the birth place of", "Alice Smith"): -2.0,
        ("Alice was born in", "Rome, Italy"): -1.0,
        ("Alice was born in", "Rome"): -2.0,
    }
    rows, _ = run_toy(tmp_path, test, scores)
    r = rows["P19|Q1|Q90#r1"]
    assert (r["second_prediction"], r["start"], r["coherent"]) == ("Alice", "Alice Smith", True)
    a = rows["P19|Q5|Q60#r1"]
    assert (a["first_prediction"], a["gold"], a["first_correct"]) == ("Rome, Italy", "Rome", True)
    # "Rome, Italy" is another entity: its subject Zed is excluded when predicting back from it
    assert a["excluded"] == ["Zed"]


def test_authors_filter_counts_an_echo_as_incoherent(tmp_path):
    """S = "Brody Raion" (gold Lviv); the model answers O' = "Brody", then S' = "Brody": a partial
    match of S. The authors' code counts a second prediction equal to the first as incoherent."""
    test = [fact("Brody Raion", "Lviv", "Q1", "Q3"), fact("Xavier", "Brody", "Q9", "Q2"), fact("Brody", "Kyiv", "Q2", "Q4")]
    scores = {("Brody Raion was born in", "Brody"): -1.0, ("Brody is the birth place of", "Brody"): -1.0}
    plain, _ = run_toy(tmp_path / "a", test, scores)
    r = plain["P19|Q1|Q3#r1"]
    assert (r["first_prediction"], r["second_prediction"], r["excluded"], r["coherent"]) == ("Brody", "Brody", ["Xavier"], True)
    filtered, _ = run_toy(tmp_path / "b", test, scores, authors_filters=True)
    assert filtered["P19|Q1|Q3#r1"]["coherent"] is False


def test_max_candidates_caps_only_when_asked_and_keeps_the_answer(tmp_path):
    test = [fact(f"S{i}", f"O{i}", f"QS{i}", f"QO{i}") for i in range(30)]
    full, _ = run_toy(tmp_path / "a", test, {})
    assert {r["first_candidates"] for r in full.values()} == {30}
    capped, scorer = run_toy(tmp_path / "b", test, {}, max_candidates=5)
    for _key, r in capped.items():
        assert r["first_candidates"] in (5, 6) and r["second_candidates"] in (5, 6)
    for req in scorer.requests:
        assert len(req.options) in (5, 6)
    r = capped["P19|QS7|QO7#r1"]
    assert r["first_gold_rank"] is not None and r["second_gold_rank"] is not None  # gold always offered
    with pytest.raises(ConfigError, match="max_candidates=1: must be at least 2"):
        CoherencyConfig(max_candidates=1)


def test_mid_template_slot_scores_the_rest_of_the_sentence():
    assert split_template("[X] was born in [Y]", "[Y]", "Alice") == ("Alice was born in", " ", "")
    assert split_template("In [Y] , [X] was born .", "[Y]", "Alice") == ("In", " ", " , Alice was born .")
    ctx, conts = build_query("[Y] is where [X] was born", "[Y]", "Alice", ["Paris"], None, "<s>")
    assert (ctx, conts) == ("<s>", ["Paris is where Alice was born"])
    ctx, conts = build_query("[Y] is where [X] was born", "[Y]", "Alice", ["Paris"], "Alice grew up in Paris.", "<s>")
    assert (ctx, conts) == ("Alice grew up in Paris.", [" Paris is where Alice was born"])
    ctx, conts = build_query("[X]'s capital is [Y]", "[X]", "France", ["Paris"], "Evidence.", "<s>")
    assert (ctx, conts) == ("Evidence.", [" Paris's capital is France"])


# ------------------------------------------------------------------ runner end to end (tiny RANDOM model)
@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from factprobe.models import load_model

    return load_model(str(tiny_model_path("llama")))


TOY = [
    fact("France", "Paris", "Q142", "Q90", rel="P36", context="France is a country. Its capital is Paris."),
    fact("Italy", "Rome", "Q38", "Q220", rel="P36"),
    fact("Germany", "Berlin", "Q183", "Q64", rel="P36"),
    fact("Paris", "France", "Q90", "Q142", rel="P1376"),
    fact("Rome", "Italy", "Q220", "Q38", rel="P1376"),
    fact("Alice", "Paris", "Q1", "Q90", rel="P19"),
]
TOY_TEMPLATES = [
    {"relation": "P36", "template_obj": "The capital of [X] is [Y]", "template_sub": "[Y] is the capital of [X]"},
    {"relation": "P1376", "template_obj": "[X] is the capital of [Y]", "template_sub": "[Y]'s capital is [X]"},
    {"relation": "P19", "template_obj": "[X] was born in [Y]", "template_sub": ""},  # no inverse template
]


def toy_cfg(tiny, tmp_path, **kw) -> RunConfig:
    data = write_jsonl(tmp_path / "data" / "toy.jsonl", TOY)
    templates = write_jsonl(tmp_path / "data" / "templates.jsonl", TOY_TEMPLATES)
    return RunConfig.from_dict(
        {
            "probe": "coherency",
            "model": str(tiny.path),
            "source": "triples",
            "data": str(data),
            "coherency_templates": str(templates),
            "device": "cpu",
            "dtype": "float32",
            **kw,
        }
    )


def results(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / RESULTS).read_text().splitlines()]


def test_runner_end_to_end_rows_metrics_and_dropped_relation(tiny, tmp_path):
    out = tmp_path / "out"
    outcome = run_probe(toy_cfg(tiny, tmp_path), out, loaded=tiny, progress=False, log=lambda m: None)
    rows = results(out)
    assert [r["key"] for r in rows] == [
        f"{f}#r{n}" for f in ("P36|Q142|Q90", "P36|Q38|Q220", "P36|Q183|Q64", "P1376|Q90|Q142", "P1376|Q220|Q38") for n in (1, 2)
    ]
    for r in rows:
        assert ROW_FIELDS <= set(r) and r["cardinality"] == "1-1"
        assert isinstance(r["first_correct"], bool) and isinstance(r["coherent"], bool)
        assert r["first_candidates"] == 3 if r["relation"] == "P36" else 2
    fr = rows[0]
    assert fr["context"] == "France is a country. Its capital is Paris. The capital of France is"
    assert rows[1]["context"] == "France is a country. Its capital is Paris. Paris is the capital of"
    assert rows[2]["context"] == "The capital of Italy is" and rows[6]["context"] == "Paris is the capital of"
    assert rows[7]["context"] == "France's capital is"
    m = json.loads((out / "metrics.json").read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    for k in ("coherency", "coherency_round1", "coherency_round2", "correct_round1", "correct_round2"):
        assert m[k] is None or 0.0 <= m[k] <= 1.0
    assert set(m["per_relation"]) == {"P36", "P1376"} and m["per_relation"]["P36"]["n_items"] == 3
    assert set(m["per_cardinality"]) == {"1-1", "N-1", "N-M"} and m["per_cardinality"]["1-1"]["n_relations"] == 2
    assert m["per_cardinality"]["N-M"]["coherency"] is None
    assert m["dropped_relations"] == {"P19": "P19: no inverse template (template_sub) in templates.jsonl:3"}
    assert any("P19: no inverse template" in n for n in outcome.notes)
    assert m["coherency"] == pytest.approx(
        np.mean([np.mean([r["coherent"] for r in rows if r["relation"] == rel]) for rel in ("P36", "P1376")])
    )
    assert m["items_with_context"] == 1 and m["n"] == 10 and m["tokens_forwarded"] > 0


def test_runner_resumes_and_refuses_another_config(tiny, tmp_path):
    cfg = toy_cfg(tiny, tmp_path)
    out = tmp_path / "out"
    run_probe(cfg, out, loaded=tiny, progress=False, log=lambda m: None)
    full = results(out)
    # a crash after the first batch: three rows in the checkpoint, the fourth torn mid-write
    (out / RESULTS).unlink()
    (out / CHECKPOINT).write_text("".join(json.dumps(r) + "\n" for r in full[:3]) + json.dumps(full[3])[:30])
    again = run_probe(cfg, out, loaded=tiny, progress=False, log=lambda m: None)
    rows = results(out)
    # item-wise: the item whose #r2 row was torn is scored again (both rows), the rows kept are not
    assert again.n_resumed == 3 and again.n_scored_now == 7
    assert [r["key"] for r in rows] == [r["key"] for r in full]
    for a, b in zip(full, rows):
        assert (a["first_prediction"], a["second_prediction"], a["coherent"]) == (
            b["first_prediction"],
            b["second_prediction"],
            b["coherent"],
        )
        assert a["first_score"] == pytest.approx(b["first_score"], abs=1e-5)
    assert run_probe(cfg, out, loaded=tiny, progress=False, log=lambda m: None).n_scored_now == 0
    with pytest.raises(ConfigError, match="different configuration"):
        run_probe(toy_cfg(tiny, tmp_path, max_candidates=2), out, loaded=tiny, progress=False, log=lambda m: None)


def test_cli_option_overrides_the_templates_file(tmp_path, monkeypatch):
    from factprobe.cli import build_parser
    from factprobe.config import namespace_to_dict

    data = write_jsonl(tmp_path / "toy.jsonl", TOY)
    templates = write_jsonl(tmp_path / "mine.jsonl", TOY_TEMPLATES[:1])
    parser = build_parser()
    args = parser.parse_args(
        [
            "probe",
            "coherency",
            "--source",
            "triples",
            "--data",
            str(data),
            "--coherency-templates",
            str(templates),
            "--max-candidates",
            "10",
        ]
    )
    probe = get_probe(args.probe)
    cfg = RunConfig.from_dict({"probe": "coherency", **namespace_to_dict(args, (BaseConfig, probe.config_class))})
    assert cfg.params.coherency_templates == str(templates) and cfg.params.max_candidates == 10
    p = probe.prepare(cfg)
    assert p.info["coherency_templates_file"] == str(templates) and list(p.items) == ["P36"]
    assert set(p.dropped) == {"P1376", "P19"}
    # the default is the data root's file
    monkeypatch.setenv("FACTPROBE_DATA", str(tmp_path / "root"))
    write_jsonl(tmp_path / "root" / "coherency" / "relations_autoregressive.jsonl", TOY_TEMPLATES[1:2])
    p = probe.prepare(RunConfig.from_dict({"probe": "coherency", "source": "triples", "data": str(data)}))
    assert list(p.items) == ["P1376"]
    help_text = " ".join(
        parser._subparsers._group_actions[0]
        .choices["probe"]
        ._subparsers._group_actions[0]
        .choices["coherency"]
        .format_help()
        .split()
    )
    assert "--coherency-templates" in help_text and "coherency/relations_autoregressive.jsonl under the data root" in help_text


# ------------------------------------------------------------------ exactness (tiny RANDOM model)
def test_step_scores_equal_naive_full_forwards(tiny, tmp_path):
    from factprobe.lm.naive import naive_logprob
    from factprobe.lm.scorer import ChoiceRequest

    cfg = toy_cfg(tiny, tmp_path)
    probe = get_probe("coherency")
    prepared = probe.prepare(cfg)
    session = Session(cfg, tiny, prepared, lambda m: None)
    rows = probe.score_batch(session, probe.open_relation(session, "P36"), prepared.items["P36"][:2])
    model, tok = tiny.model, tiny.tokenizer
    for r in rows:
        assert r["first_score"] == pytest.approx(naive_logprob(model, tok, r["context"], " " + r["first_prediction"]), abs=1e-4)
        assert r["second_score"] == pytest.approx(
            naive_logprob(model, tok, r["second_context"], " " + r["second_prediction"]), abs=1e-4
        )
    gold = rows[0]["first_gold_score"]
    assert gold == pytest.approx(naive_logprob(model, tok, rows[0]["context"], " Paris"), abs=1e-4)
    # a template whose predicted slot is not last: candidate + rest of the sentence, exact too
    ctx, conts = build_query("In [Y] , [X] was born .", "[Y]", "Alice", ["Paris", "Rome", "Berlin"], None, "<s>")
    got = session.scorer.score_choices([ChoiceRequest(ctx, conts)])[0]
    for g, c in zip(got, conts):
        assert g == pytest.approx(naive_logprob(model, tok, ctx, c), abs=1e-4)


def test_mean_score_divides_by_the_scored_tokens(tiny, tmp_path):
    from factprobe.probes.coherency import continuation_token_counts

    cfg = toy_cfg(tiny, tmp_path)
    probe = get_probe("coherency")
    prepared = probe.prepare(cfg)
    session = Session(cfg, tiny, prepared, lambda m: None)
    counts = continuation_token_counts(session.scorer, "The capital of France is", [" Paris", " Rome Rome Rome"])
    enc = tiny.tokenizer
    assert counts == [
        len(enc(" Paris", add_special_tokens=False)["input_ids"]),
        len(enc(" Rome Rome Rome", add_special_tokens=False)["input_ids"]),
    ]
    summed = probe.score_batch(session, probe.open_relation(session, "P36"), prepared.items["P36"][:1])
    mcfg = toy_cfg(tiny, tmp_path, candidate_score="mean")
    msession = Session(mcfg, tiny, prepared, lambda m: None)
    mean = probe.score_batch(msession, probe.open_relation(msession, "P36"), prepared.items["P36"][:1])
    n = continuation_token_counts(session.scorer, summed[0]["context"], [" " + summed[0]["gold"]])[0]
    assert mean[0]["first_gold_score"] == pytest.approx(summed[0]["first_gold_score"] / n, abs=1e-6)


# ------------------------------------------------------------------ the real model
@pytest.mark.real_model
def test_real_smollm2_two_relations(real_model_path, real_data_root, tmp_path):
    """SmolLM2-135M-Instruct on LAMA P36 and P1376, 3 subjects each, 40 candidates per query
    (a seeded sample plus the answer, to stay well under a minute on 2 CPU cores)."""
    from factprobe.lm.naive import naive_logprob
    from factprobe.models import load_model

    path = real_model_path("smollm2-135m-instruct")
    loaded = load_model(str(path), device="cpu", dtype="float32")
    cfg = RunConfig.from_dict(
        {
            "probe": "coherency",
            "model": str(path),
            "source": "lama",
            "relations": "P36,P1376",
            "max_facts_per_relation": 3,
            "max_candidates": 40,
            "device": "cpu",
            "dtype": "float32",
        }
    )
    outcome = run_probe(cfg, tmp_path / "out", loaded=loaded, progress=False, log=lambda m: None)
    rows = outcome.results.to_dict("records")
    assert len(rows) == 12 and {r["relation"] for r in rows} == {"P36", "P1376"}
    p36 = [r for r in rows if r["relation"] == "P36" and r["round"] == 1]
    assert all(r["context"] == f"The capital of {r['subject']} is" for r in p36)
    assert all(r["second_context"] == f"{r['first_prediction']} is the capital of" for r in p36)
    m = outcome.metrics
    assert m["per_cardinality"]["1-1"]["n_relations"] == 2 and m["subject_candidates"]["P36"] == 693
    for k in ("coherency", "coherency_round1", "coherency_round2", "correct_round1", "correct_round2"):
        assert 0.0 <= m[k] <= 1.0
    r = rows[0]
    assert r["first_score"] == pytest.approx(
        naive_logprob(loaded.model, loaded.tokenizer, r["context"], " " + r["first_prediction"]), abs=1e-4
    )


# ------------------------------------------------------------------ --candidate-score authors (paulyoussef/coherency)
def their_loop(model, tokenizer, query: str, candidates: list[str], batch_size: int) -> list[tuple[str, float]]:
    """`predict_typed_preds_optimized` (paulyoussef/coherency utils/newutils.py lines 512-561, commit
    d0acafe) for ONE row, written out plainly: (candidate, score) sorted best first. Their
    GPT-2/GPT-Neo generation config decodes greedily; `do_sample=False, num_beams=1` pins that here."""
    import copy

    import torch

    tok = copy.deepcopy(tokenizer)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"  # GPT-2's tokenizer pads on the right
    ents = []
    previous_shape = None
    for start in range(0, len(candidates), batch_size):
        batch = candidates[start : start + batch_size]
        labels = tok(batch, return_tensors="pt", padding=True, truncation=True, add_special_tokens=False)
        if labels["input_ids"].shape != previous_shape:
            inputs = tok([query] * len(batch), return_tensors="pt", padding=True, truncation=True)
            with torch.no_grad():
                out = model.generate(
                    inputs["input_ids"],
                    pad_token_id=tok.eos_token_id,
                    return_dict_in_generate=True,
                    output_scores=True,
                    min_new_tokens=labels["input_ids"].shape[1],
                    max_new_tokens=labels["input_ids"].shape[1],
                    do_sample=False,
                    num_beams=1,
                )
            probas = torch.stack(list(out.scores), dim=1).log_softmax(-1)
        sel = torch.clone(probas).gather(dim=2, index=labels["input_ids"].unsqueeze(2)).squeeze(-1)
        sel = torch.where(sel == float("-inf"), torch.tensor(0.0), sel)
        sel = sel * labels["attention_mask"]
        final = sel.sum(axis=-1) / sel.count_nonzero(dim=-1)
        ents += list(zip(batch, final.tolist()))
        previous_shape = labels["input_ids"].shape
    return sorted(ents, key=lambda e: e[1], reverse=True)


AUTHORS_CANDIDATES = [
    "Paris",
    "Rome",
    "Berlin",
    "Ulm",
    "Warsaw",
    "Niels Bohr",
    "Marie Curie",
    "Ottawa, Canada",
    "Tokyo 1922",
    "Lima",
]


@pytest.mark.slow  # model.generate per batch of candidates, as their loop does
def test_authors_scores_equal_their_loop(tiny, tmp_path):
    """Every candidate's score equals the authors' loop to 1e-4 (multi-token candidates of several
    lengths, batches of 3 so their shape-keyed reuse and padding both happen); the teacher-forced
    per-token mean is a different number for the multi-token ones."""
    from factprobe.lm.generate import Generator
    from factprobe.lm.scorer import ChoiceRequest, Scorer
    from factprobe.probes.coherency import authors_candidate_scores, continuation_token_counts

    model, tok = tiny.model, tiny.tokenizer
    scorer = Scorer(model, tok, device="cpu")
    eos = Generator(model, tok, device="cpu").eos_token_ids
    assert eos  # the EOS ban is exercised
    for query in ("The capital of France is ", "Paris is the capital of "):
        ours = dict(zip(AUTHORS_CANDIDATES, authors_candidate_scores(scorer, query, AUTHORS_CANDIDATES, eos)))
        theirs = their_loop(model, tok, query, AUTHORS_CANDIDATES, batch_size=3)
        for cand, score in theirs:
            assert ours[cand] == pytest.approx(score, abs=1e-4), (query, cand)
        assert max(ours, key=ours.get) == theirs[0][0]
    # not the teacher-forced mean: a candidate's later tokens follow the greedy tokens, not its own
    multi = [c for c in AUTHORS_CANDIDATES if len(tok(c, add_special_tokens=False)["input_ids"]) > 1]
    ctx, conts = "The capital of France is", [" " + c for c in multi]
    sums = scorer.score_choices([ChoiceRequest(ctx, conts)])[0]
    forced = [float(x) / n for x, n in zip(sums, continuation_token_counts(scorer, ctx, conts))]
    authors = authors_candidate_scores(scorer, ctx + " ", multi, eos)
    assert any(abs(a - f) > 1e-3 for a, f in zip(authors, forced))


@pytest.mark.slow  # model.generate per step and batch, as their loop does
def test_authors_mode_end_to_end_matches_their_pipeline(tiny, tmp_path):
    """The probe under `--candidate-score authors`: the authors' query text (space before the slot
    kept), their filters on, and every step's prediction and score equal to their loop over the
    step's candidates (first step: all of the side; second step: less the excluded ones)."""
    cfg = toy_cfg(tiny, tmp_path, candidate_score="authors")
    assert cfg.params.authors_filters is True  # the authors' scoring brings their filters
    probe = get_probe("coherency")
    prepared = probe.prepare(cfg)
    probe.validate(cfg, prepared)
    session = Session(cfg, tiny, prepared, lambda m: None)
    state = probe.open_relation(session, "P36")
    rows = probe.score_batch(session, state, prepared.items["P36"][:2])
    objects, subjects = sorted(state.objects.pool), sorted(state.subjects.pool)
    for r in rows:
        first_side, second_side = (objects, subjects) if r["round"] == 1 else (subjects, objects)
        want = their_loop(tiny.model, tiny.tokenizer, r["context"], first_side, batch_size=4)[0]
        assert (r["first_prediction"], r["first_score"]) == (want[0], pytest.approx(want[1], abs=1e-4))
        rest = [c for c in second_side if c not in r["excluded"]]
        want = their_loop(tiny.model, tiny.tokenizer, r["second_context"], rest, batch_size=4)[0]
        assert (r["second_prediction"], r["second_score"]) == (want[0], pytest.approx(want[1], abs=1e-4))
    france = rows[0]
    assert france["context"] == "France is a country. Its capital is Paris. The capital of France is "
    assert rows[2]["context"] == "The capital of Italy is " and rows[3]["context"] == "Rome is the capital of "
    assert (
        france["second_context"] == f"France is a country. Its capital is Paris. {france['first_prediction']} is the capital of "
    )


def test_authors_mode_needs_the_slot_last_and_turns_the_filters_on(tiny, tmp_path):
    assert CoherencyConfig(candidate_score="authors").authors_filters is True
    assert CoherencyConfig(candidate_score="sum").authors_filters is False
    probe = get_probe("coherency")
    cfg = toy_cfg(tiny, tmp_path, candidate_score="authors")
    prepared = probe.prepare(cfg)
    prepared.info["coherency_templates"]["P36"]["template_sub"] = "In [X] , [Y] is the capital ."
    with pytest.raises(
        ConfigError,
        match=r"template_sub 'In \[X\] , \[Y\] is the capital \.' of P36 does not end "
        r"with \[X\]",
    ):
        probe.validate(cfg, prepared)
    plain = toy_cfg(tiny, tmp_path)
    probe.validate(plain, prepared)  # the other scores take any slot position
