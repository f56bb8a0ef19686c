"""The belief-icl probe (BELIEF-ICL, zhao2024 section 3) end to end.

A tiny RANDOM llama (widened window, redrawn weights: `widened_tiny_llama` from the QA tests) runs the
mechanics on a toy multi-prompt set: prompt text per setting and instruction, own-pair exclusion,
shared-KV sampling (one `Generator.sample` call per prompt, one prompt forward each), determinism
and metrics in range. Its answers are gibberish and its numbers mean nothing. Scripted answers
(`Generator.greedy` replaced) check matching, empty answers and the one-word rate. One test runs the
real SmolLM2-135M-Instruct and Gemma-3-270M on two LAMA relations (`real_model`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.datasets.multiprompt import render_causal, render_mlm
from factprobe.errors import ConfigError
from factprobe.facts import Fact
from factprobe.framework.config import BaseConfig, RunConfig
from factprobe.framework.runner import run_probe
from factprobe.lm.generate import Generation, Generator
from factprobe.models import load_model
from factprobe.probes.belief_icl import INSTRUCTIONS, SETTINGS, BeliefICLConfig, DemoPool
from tests.probes.test_qa import widened_tiny_llama

CAPITALS = [
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("Canada", "Ottawa"),
    ("Peru", "Lima"),
]
MP_LINE = "Predict the [MASK] in each sentence in one word."
QA_LINE = "Answer each question in one word."


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(recs) -> str:
    return "".join(json.dumps(r) + "\n" for r in recs)


@pytest.fixture
def toy_root(tmp_path, monkeypatch) -> Path:
    """P36: 7 pairs, templates LAMA + 2 ParaRel (one with [Y] inside) + 2 questions; P99: 2 pairs, 1 template."""
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
    monkeypatch.setenv("FACTPROBE_DATA", str(root))
    return root


@pytest.fixture(scope="module")
def tiny(tiny_model_path, tmp_path_factory):
    loaded = load_model(str(widened_tiny_llama(tiny_model_path, tmp_path_factory.mktemp("wide"))))
    assert loaded.is_random
    return loaded


def config(root: Path, tmp_path: Path, model, **params) -> RunConfig:
    params.setdefault("draws", 200)
    params.setdefault("template_sources", "lama,pararel,belief-qa")  # the toy root has no lpaqa/ (issue 18 item 10)
    params.setdefault("samples", 0)
    params.setdefault(
        "belief_qa_templates",
        str(
            write(
                tmp_path / "qa.tsv",
                "relation\ttemplate\nP36\tWhat is the capital of [X]? [Y]\nP36\tWhich city is the capital of [X]? [Y]\n",
            )
        ),
    )
    return RunConfig.from_dict(
        {
            "probe": "belief-icl",
            "model": str(model),
            "source": "lama",
            "data": str(root / "lama"),
            "device": "cpu",
            "dtype": "float32",
            **params,
        }
    )


def run(cfg: RunConfig, out: Path, loaded=None):
    return run_probe(cfg, out, loaded=loaded, progress=False, log=lambda m: None)


def own_key(row: dict) -> tuple[str, str]:
    return row["relation"], row["fact_id"].split("|")[1]


# ------------------------------------------------------------------ config
def test_config_validates():
    c = BeliefICLConfig()
    assert (c.setting, c.instruction, c.samples, c.draws, c.shots) == ("4-template", "mp", 100, 10_000, 4)
    assert BeliefICLConfig(setting="zero-shot").shots == 0
    assert INSTRUCTIONS == {"mp": MP_LINE, "qa": QA_LINE}
    for bad in (
        {"setting": "8-shot"},
        {"instruction": "chat"},
        {"samples": -1},
        {"draws": 0},
        {"max_answer_tokens": 0},
        {"template_sources": "lama,nope"},
    ):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            BeliefICLConfig(**bad)


# ------------------------------------------------------------------ demonstrations
def test_demo_pool_never_draws_the_probed_pair():
    """With exactly 5 pairs in the relation, every 4-shot draw must be the 4 OTHER pairs."""
    from factprobe.datasets.multiprompt import MultiPromptItem

    facts = [Fact("P1", f"s{i}", f"o{i}", f"S{i}", f"O{i}") for i in range(5)]
    facts.append(Fact("P1", "s0", "other object of s0", "S0", "O99"))  # a second fact of the same pair
    templates = {
        "P1": [{"template_id": "P1:a:1", "template": "[X] has [Y]."}, {"template_id": "P1:b:2", "template": "[X] owns [Y]."}]
    }
    pairs: dict = {}
    for f in facts:
        if all(g.subject_key != f.subject_key for g in pairs.get("P1", [])):
            pairs.setdefault("P1", []).append(f)
    pool = DemoPool(pairs, templates)
    for i in range(5):
        item = MultiPromptItem(facts[i].fact_id, "P1", f"s{i}", f"S{i}", f"o{i}", f"O{i}", (f"o{i}",))
        for setting in ("4-random", "4-relation", "4-template"):
            for seed in range(5):
                drawn = pool.draw(item, setting, "mp", seed)
                assert sorted(f.subject_id for f, _ in drawn) == sorted(f"S{j}" for j in range(5) if j != i)
                assert pool.draw(item, setting, "mp", seed) == drawn  # seeded
                if setting == "4-template":
                    assert all(t is None for _, t in drawn)
                else:
                    assert all(t in templates["P1"] for _, t in drawn)
        assert pool.draw(item, "zero-shot", "mp", 0) == []


@pytest.mark.parametrize("setting", SETTINGS)
def test_prompts_per_setting(setting, toy_root, tmp_path, tiny):
    out = run(config(toy_root, tmp_path, tiny.path, setting=setting), tmp_path / "run", loaded=tiny)
    rows = out.results.to_dict("records")
    # P36: 7 pairs x 5 templates; P99: 2 pairs x 1 template
    assert len(rows) == 7 * 5 + 2 and len({r["key"] for r in rows}) == len(rows)
    by_fact: dict[str, list[dict]] = {}
    for r in rows:
        by_fact.setdefault(r["fact_id"], []).append(r)
        lines = r["prompt"].split("\n")
        assert lines[0] == MP_LINE
        assert lines[-2:] == [f"Q: {render_mlm(r['template'], r['subject'], '[MASK]')}", "A:"]
        demos = r["demonstrations"]
        assert len(lines) == 1 + 2 * len(demos) + 2
        for d in demos:  # never the probed pair
            assert (d["relation"], d["fact_id"].split("|")[1]) != own_key(r)
        if setting == "zero-shot":
            assert demos == [] and r["prompt"] == f"{MP_LINE}\nQ: {lines[-2][3:]}\nA:"
        else:
            pool = 6 if r["relation"] == "P36" else 1  # other pairs of the relation
            want = 4 if setting == "4-random" else min(4, pool)
            assert len(demos) == want
            for i in range(len(demos)):
                assert lines[1 + 2 * i].startswith("Q: ") and lines[2 + 2 * i].startswith("A: ")
                assert lines[2 + 2 * i].endswith(".")
        if setting in ("4-relation", "4-template"):
            assert all(d["relation"] == r["relation"] for d in demos)
        if setting == "4-template":
            assert all(d["template_id"] == r["template_id"] for d in demos)
    # one draw per pair: the demonstration facts are the same for all templates of a pair
    for fact_rows in by_fact.values():
        assert len({tuple(d["fact_id"] for d in r["demonstrations"]) for r in fact_rows}) == 1
        if setting in ("zero-shot", "4-random", "4-relation"):  # the whole block is shared
            assert len({r["prompt"].rsplit("\nQ: ", 1)[0] for r in fact_rows}) == 1
    if setting == "4-random":
        assert any(d["relation"] != r["relation"] for r in rows for d in r["demonstrations"])
    if setting == "4-relation":
        assert len({d["template_id"] for r in rows for d in r["demonstrations"]}) > 1
    m = out.metrics
    assert m["setting"] == setting and m["templates_per_relation"] == {"P36": 5, "P99": 1}
    assert m["overconf"] is None and "samples 0" in m["overconf_reason"]
    assert set(m["consist_undefined"]) == {"P99"} and m["per_relation"]["P99"]["consist"] is None


def test_qa_instruction_asks_questions_only(toy_root, tmp_path, tiny):
    out = run(config(toy_root, tmp_path, tiny.path, instruction="qa", setting="4-relation"), tmp_path / "run", loaded=tiny)
    rows = out.results.to_dict("records")
    assert {r["relation"] for r in rows} == {"P36"} and len(rows) == 7 * 2  # P99 has no question template
    assert "P99" in out.metrics["relations_without_templates"]
    for r in rows:
        lines = r["prompt"].split("\n")
        assert lines[0] == QA_LINE and r["style"] == "question"
        assert lines[-2:] == [f"Q: {render_causal(r['template'], r['subject'])}", "A:"]
        assert "[MASK]" not in r["prompt"] and all(line.endswith("?") for line in lines[1:-1:2])


# ------------------------------------------------------------------ sampling, determinism, metrics
@pytest.mark.slow
def test_sampling_shares_the_prompt_kv_and_is_deterministic(toy_root, tmp_path, tiny, monkeypatch):
    calls: list[tuple[str, int]] = []
    real_sample = Generator.sample

    def counting(self, prompt, n, *args, **kwargs):
        calls.append((prompt, n))
        before = self.stats.prompt_tokens
        outs = real_sample(self, prompt, n, *args, **kwargs)
        # the prompt is forwarded ONCE for all n samples (not n times)
        assert self.stats.prompt_tokens - before == len(self.encode(prompt))
        return outs

    monkeypatch.setattr(Generator, "sample", counting)
    cfg = config(toy_root, tmp_path, tiny.path, setting="4-template", samples=6, relations="P36", max_facts_per_relation=3)
    a = run(cfg, tmp_path / "a", loaded=tiny)
    rows = a.results.to_dict("records")
    assert len(rows) == 3 * 5 and len(calls) == len(rows)  # one sample call per prompt, never one per sample
    assert [c[0] for c in calls] == [r["prompt"] for r in rows] and {c[1] for c in calls} == {6}
    for r in rows:
        assert r["n_samples"] == 6 and r["confidence"] == r["n_samples_matching"] / 6
    assert len({r["confidence"] for r in rows}) > 1
    # the confidence of a row is reproduced by sampling its prompt again with its seed
    from factprobe.metrics.belief_match import consistency_match
    from factprobe.seeding import stable_seed

    gen = Generator(tiny.model, tiny.tokenizer, token_budget=100_000)
    r = rows[0]
    again = real_sample(
        gen,
        r["prompt"],
        6,
        max_new_tokens=10,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        seed=stable_seed(0, "belief-icl-samples", r["fact_id"], r["template_id"]),
        stop=("\n", "Q:"),
    )
    assert sum(consistency_match(r["answer"], s.text.strip()) for s in again) == r["n_samples_matching"]
    # same config and seed: identical rows and metrics; another seed: other demonstrations
    b = run(cfg, tmp_path / "b", loaded=tiny)
    assert b.results.equals(a.results)
    assert {k: v for k, v in b.metrics.items() if "token" not in k and k != "notes"} == {
        k: v for k, v in a.metrics.items() if "token" not in k and k != "notes"
    }
    c = run(cfg.replace(seed=7), tmp_path / "c", loaded=tiny)
    assert [r["demonstrations"] for r in c.results.to_dict("records")] != [r["demonstrations"] for r in rows]
    m = a.metrics
    for k in ("acc", "consist", "coverage_avg", "coverage_max", "coverage_oracle", "one_word_rate", "mean_confidence"):
        assert 0 <= m[k] <= 1, k
    assert -1 <= m["overconf"] <= 1 and m["acc_range"] >= 0 and m["acc_stdev"] >= 0 and m["n_draws"] == 200
    assert [b["n"] for b in m["calibration"]["overconf"]] == [2] * 5 + [1] * 5  # 15 prompts in 10 equal-size bins
    assert m["instruction_following"] == {"acc": m["acc"], "one_word_rate": m["one_word_rate"]}
    for name in ("belief_templates.parquet", "belief_relations.parquet", "belief_calibration.parquet"):
        assert (tmp_path / "a" / name).is_file()


def test_scripted_answers_matching_empty_and_one_word(toy_root, tmp_path, tiny, monkeypatch):
    """Answers chosen per template: matching with lemmas and articles, empty answers, one-word rate."""
    answers = {
        "The capital of [X] is [Y].": " the {gold}.",  # article + period: correct, 2 chunks
        "[X]'s capital is [Y].": " {gold}",  # correct, one word
        "[Y] is the capital of [X].": "   ",  # whitespace only: empty, wrong
        "What is the capital of [X]? [Y].": " Atlantis",  # wrong, one word
        "Which city is the capital of [X]? [Y].": " City of {gold}",  # contains the gold: correct
        "[X] was born in [Y].": "",
    }  # empty

    def greedy(self, prompts, max_new_tokens=16, stop=(), shared_prefix=None):
        outs = []
        for p in prompts:
            row = next(r for r in pending if r[0] == p)
            outs.append(Generation(answers[row[1]].format(gold=row[2]), [], [], "stop"))
        return outs

    from factprobe.probes import belief_icl

    pending: list[tuple[str, str, str]] = []
    real_prompts_for = belief_icl.BeliefICL.prompts_for

    def prompts_for(self, session, item):
        out = real_prompts_for(self, session, item)
        pending.extend((pp.prompt, pp.template["template"], item.gold[0]) for pp in out)
        return out

    monkeypatch.setattr(belief_icl.BeliefICL, "prompts_for", prompts_for)
    monkeypatch.setattr(Generator, "greedy", greedy)
    out = run(config(toy_root, tmp_path, tiny.path, setting="zero-shot"), tmp_path / "run", loaded=tiny)
    rows = out.results.to_dict("records")
    by_template = {}
    for r in rows:
        by_template.setdefault(r["template"], set()).add((r["correct"], r["empty"], r["one_word"]))
    assert by_template == {
        "The capital of [X] is [Y].": {(True, False, False)},
        "[X]'s capital is [Y].": {(True, False, True)},
        "[Y] is the capital of [X].": {(False, True, False)},
        "What is the capital of [X]? [Y].": {(False, False, True)},
        "Which city is the capital of [X]? [Y].": {(True, False, False)},
        "[X] was born in [Y].": {(False, True, False)},
    }
    m = out.metrics
    assert m["n_empty"] == 7 + 2 and m["empty_rate"] == pytest.approx(9 / 37)
    assert m["one_word_rate"] == pytest.approx(14 / 37)
    # every draw takes one template per relation: P36 accuracy is 1 for 3 of 5 templates, P99 is 0
    assert m["per_relation"]["P36"]["acc"] == pytest.approx(3 / 5) and m["per_relation"]["P99"]["acc"] == 0.0
    assert m["coverage_oracle"] == pytest.approx(7 / 9) and m["coverage_max"] == pytest.approx(7 / 9)
    # consistency is bidirectional: "the Paris." ~ "Paris" ~ "City of Paris" agree pairwise (3 of 10 pairs);
    # the empty answer and "Atlantis" agree with nothing
    assert m["per_relation"]["P36"]["consist"] == pytest.approx(3 / 10)


# ------------------------------------------------------------------ real models
@pytest.mark.real_model
@pytest.mark.parametrize("alias", ["smollm2-135m-instruct", "gemma-3-270m"])
def test_real_models_on_lama(alias, real_data_root, real_model_path, tmp_path):
    """Two LAMA relations with >= 5 templates each, 2 pairs, 5 templates, 3 samples: metrics in range,
    seeds deterministic (the second run is compared on one relation)."""
    loaded = load_model(str(real_model_path(alias)), device="cpu", dtype="float32")
    cfg = RunConfig(
        "belief-icl",
        BaseConfig(
            model=str(loaded.path), source="lama", relations="P36,P103", max_facts_per_relation=2, device="cpu", dtype="float32"
        ),
        BeliefICLConfig(setting="4-template", instruction="mp", samples=3, max_templates=5, draws=1000, max_answer_tokens=6),
    )
    a = run(cfg, tmp_path / "a", loaded=loaded)
    rows = a.results.to_dict("records")
    assert len(rows) == 2 * 2 * 5 and a.metrics["templates_per_relation"] == {"P36": 5, "P103": 5}
    m = a.metrics
    for k in ("acc", "consist", "coverage_avg", "coverage_max", "coverage_oracle", "one_word_rate", "mean_confidence"):
        assert m[k] is not None and 0 <= m[k] <= 1, k
    assert -1 <= m["overconf"] <= 1 and 0 <= m["acc_range"] <= 1
    assert m["coverage_avg"] <= m["coverage_max"] <= m["coverage_oracle"]
    assert all(r["n_samples"] == 3 and r["prompt"].startswith(MP_LINE) for r in rows)
    print(
        f"{alias}: "
        + ", ".join(
            f"{k} {m[k]:.3f}"
            for k in ("acc", "acc_range", "acc_stdev", "consist", "overconf", "one_word_rate", "coverage_oracle")
        )
    )
    b = run(cfg.replace(relations="P36"), tmp_path / "b", loaded=loaded)
    first = [r for r in rows if r["relation"] == "P36"]
    assert [(r["prompt"], r["answer"], r["confidence"]) for r in b.results.to_dict("records")] == [
        (r["prompt"], r["answer"], r["confidence"]) for r in first
    ]
