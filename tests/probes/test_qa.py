"""The QA probe (yuan2024 FACT-Bench, sections 2-3, Tables 6-7) end to end through `run_probe`.

Most tests use a tiny RANDOM llama (its answers are gibberish and its numbers mean nothing: only the
mechanics are tested). Tests that need a model which knows some facts, or answers with nothing,
replace `Generator.greedy` by a scripted answerer (`scripted`), so the outcome of every question is
known. One test runs the real SmolLM2-135M-Instruct (and Gemma-3-270M) and checks its answers
against Hugging Face `model.generate`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from factprobe.datasets.counterfactual import draw_exemplars
from factprobe.datasets.known_unknown import COLUMNS as KU_COLUMNS
from factprobe.errors import ConfigError, DataError
from factprobe.framework.checkpoint import CHECKPOINT, RESULTS, FolderBusyError, RunFolder
from factprobe.framework.config import RunConfig
from factprobe.framework.registry import get_probe
from factprobe.framework.runner import run_probe
from factprobe.lm.generate import Generation, Generator, first_stop
from factprobe.metrics import qa as qam
from factprobe.models import load_model
from factprobe.probes.qa import BATCH, INSTRUCTION, STOP, QAProbeConfig, exemplar_block, pool_items, qa_prompt

INSTRUCTION_LINE = (
    "Instruction: answer the following question. Don't include explanation. Keep the answer as concise as possible."
)
ROW_FIELDS = {
    "key",
    "fact_id",
    "relation",
    "subject",
    "question",
    "prompt",
    "answer",
    "gold",
    "em",
    "f1",
    "contains",
    "empty",
    "split",
    "setting",
    "shots",
    "shots_asked",
    "exemplars",
    "answer_token_ids",
    "finish_reason",
    "answer_type",
    "prediction",
    "correct",
}
EXEMPLAR_FIELDS = {"fact_id", "question", "shown_answer", "true_answer", "shuffled"}
NEWLINE_GAIN = 4.0


# ------------------------------------------------------------------ helpers
def widened_tiny_llama(tiny_model_path, root: Path, window: int = 2048) -> Path:
    """The tiny RANDOM llama with a `window`-token context, redrawn louder weights and a louder
    newline, so answers also end at the stop string, some at once (`factprobe.models.testing.widen_tiny_llama`)."""
    from factprobe.models.testing import widen_tiny_llama

    return widen_tiny_llama(tiny_model_path("llama"), root, window=window, newline_gain=NEWLINE_GAIN)


@pytest.fixture(scope="module")
def tiny(tiny_model_path, tmp_path_factory):
    loaded = load_model(str(widened_tiny_llama(tiny_model_path, tmp_path_factory.mktemp("wide"))))
    assert loaded.max_length == 2048 and loaded.is_random
    return loaded


def qa_cfg(model, **kw) -> RunConfig:
    """countryinfo P36 + P1376 (+ P38, which has no question template), 3 eval facts each."""
    d = {
        "probe": "qa",
        "model": str(model.path),
        "relations": "P36,P1376,P38",
        "max_facts_per_relation": 3,
        "shots": "2",
        "qa_train_per_relation": 3,
    }
    d.update(kw)
    return RunConfig.from_dict(d)


def read_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / RESULTS).read_text(encoding="utf-8").splitlines()]


def read_metrics(out: Path) -> dict:
    def no_nan(c):
        raise AssertionError(f"metrics.json holds a bare {c}")

    return json.loads((out / "metrics.json").read_text(encoding="utf-8"), parse_constant=no_nan)


def question_of(prompt: str, block: str) -> str:
    tail = prompt[len(block) :]
    assert tail.startswith("Question: ") and tail.endswith("\nAnswer:"), tail
    return tail[len("Question: ") : -len("\nAnswer:")]


def scripted(monkeypatch, answer):
    """Replace `Generator.greedy` by `answer(question) -> text` (no model runs); returns the calls."""
    calls: list[dict] = []

    def greedy(self, prompts, max_new_tokens=16, stop=(), shared_prefix=None):
        calls.append(
            {"prompts": list(prompts), "max_new_tokens": max_new_tokens, "stop": tuple(stop), "shared_prefix": shared_prefix}
        )
        return [Generation(answer(question_of(p, shared_prefix)), [], [], "stop") for p in prompts]

    monkeypatch.setattr(Generator, "greedy", greedy)
    return calls


def hf_answer(model, tok, prompt: str, max_new_tokens: int, eos_ids) -> tuple[list[int], str]:
    """`model.generate(do_sample=False)` on the prompt alone, cut by the probe's rule: at EOS, or
    at the first token whose decoded text holds a stop string (text cut before it)."""
    enc = tok(prompt, return_tensors="pt")
    out = model.generate(
        **enc, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=sorted(eos_ids), pad_token_id=min(eos_ids)
    )
    new = out[0, enc["input_ids"].shape[1] :].tolist()
    for i, t in enumerate(new):
        if t in eos_ids:
            return new[: i + 1], tok.decode(new[:i], skip_special_tokens=True)
        text = tok.decode(new[: i + 1], skip_special_tokens=True)
        cut = first_stop(text, ("\n", "Question:"))
        if cut >= 0:
            return new[: i + 1], text[:cut]
    return new, tok.decode(new, skip_special_tokens=True)


@pytest.fixture(scope="module")
def qa_run(tiny, tmp_path_factory):
    """One tiny-model run over both splits with k = 0 and k = 2 (shared by several tests)."""
    cfg = qa_cfg(tiny, split="all", shots="0,2")
    out = tmp_path_factory.mktemp("qa") / "out"
    outcome = run_probe(cfg, out, loaded=tiny, progress=False, log=lambda m: None)
    return cfg, out, outcome


# ------------------------------------------------------------------ config and prompt text
def test_config_defaults_and_instruction_text():
    c = QAProbeConfig()
    assert c.shots == [10] and c.max_new_tokens == 16 and c.split == "eval"
    assert INSTRUCTION == INSTRUCTION_LINE
    assert STOP == ("\n", "Question:")
    assert QAProbeConfig(shots="0,10").shots == [0, 10]
    with pytest.raises(ConfigError, match="shots"):
        QAProbeConfig(shots="ten")
    with pytest.raises(ConfigError, match="split"):
        QAProbeConfig(split="test")


# ------------------------------------------------------------------ rows, prompts, metrics (tiny model)
def test_rows_hold_every_field_and_their_scores(qa_run, tiny):
    _, out, outcome = qa_run
    rows = read_rows(out)
    prepared = outcome.prepared
    n_eval = sum(map(len, prepared.items.values()))
    n_train = len(pool_items(prepared))
    assert n_eval == 6 and n_train == 6
    assert len(rows) == 2 * (n_eval + n_train) and len({r["key"] for r in rows}) == len(rows)
    for r in rows:
        assert ROW_FIELDS <= set(r), ROW_FIELDS - set(r)
        assert isinstance(r["gold"], list) and r["gold"]
        scores = qam.score_answer(r["answer"], r["gold"], r["answer_type"])
        assert {k: r[k] for k in scores} == scores
        assert r["correct"] == (r["em"] == 1.0)
        # the stop rule: the answer ends before any newline / "Question:", within 16 new tokens
        assert "\n" not in r["answer"] and "Question:" not in r["answer"]
        assert 1 <= len(r["answer_token_ids"]) <= 16
        if r["finish_reason"] == "length":
            assert len(r["answer_token_ids"]) == 16
        for e in r["exemplars"]:
            assert EXEMPLAR_FIELDS <= set(e)
    # the widened tiny model's answers end in every way: at the stop string (some at once: empty) or the length
    assert {"stop", "length"} <= {r["finish_reason"] for r in rows}
    assert any(r["empty"] and r["answer"] == "" and r["em"] == 0.0 for r in rows)
    assert len({r["answer"] for r in rows}) > len(rows) // 2
    # one row per (fact, split, k): eval and train facts, both k
    assert {(r["split"], r["shots_asked"]) for r in rows} == {("eval", 0), ("eval", 2), ("train", 0), ("train", 2)}


def test_prompt_is_instruction_then_one_shared_block_then_the_question(qa_run):
    cfg, out, outcome = qa_run
    rows = read_rows(out)
    prepared = outcome.prepared
    pool = pool_items(prepared)
    pool_ids = {it.fact_id for it in pool}
    for r in rows:
        lines = r["prompt"].split("\n")
        assert lines[0] == INSTRUCTION_LINE
        # k "Question: ... / Answer: ..." exemplar pairs, then the test question and a bare "Answer:"
        assert len(lines) == 1 + 2 * r["shots"] + 2
        for i, e in enumerate(r["exemplars"]):
            assert lines[1 + 2 * i] == f"Question: {e['question']}"
            assert lines[2 + 2 * i] == f"Answer: {e['shown_answer']}"
        assert lines[-2:] == [f"Question: {r['question']}", "Answer:"]
        assert r["prompt"] == qa_prompt(exemplar_block([_Ex(e) for e in r["exemplars"]]), r["question"])
        assert all(e["fact_id"] in pool_ids for e in r["exemplars"])  # drawn from the train split
        assert all(not e["shuffled"] and e["shown_answer"] == e["true_answer"] for e in r["exemplars"])
    zero = [r for r in rows if r["shots_asked"] == 0]
    assert all(r["prompt"] == f"{INSTRUCTION_LINE}\nQuestion: {r['question']}\nAnswer:" for r in zero)  # Table 6
    # k = 2: ONE block (the seeded draw from the pool across relations) for every question but
    # the train questions that are themselves in it
    two = [r for r in rows if r["shots_asked"] == 2]
    drawn = [it.fact_id for it in draw_exemplars(pool, 2, cfg.base.seed, "regular")]
    main = [r for r in two if r["fact_id"] not in drawn]
    assert len(main) == len(two) - 2
    assert {tuple(e["fact_id"] for e in r["exemplars"]) for r in main} == {tuple(drawn)}
    assert len({r["prompt"][: -len(r["question"]) - len("Question: \nAnswer:")] for r in main}) == 1
    assert all(r["shots"] == 2 for r in two)


class _Ex:
    """A row's exemplar dict, shaped like `Exemplar` for `exemplar_block`."""

    def __init__(self, d: dict):
        self.question, self.shown_answer = d["question"], d["shown_answer"]


def test_no_question_is_answered_with_its_own_answer_among_the_exemplars(qa_run):
    cfg, out, outcome = qa_run
    rows = read_rows(out)
    for r in rows:
        assert r["fact_id"] not in {e["fact_id"] for e in r["exemplars"]}, r["key"]
        assert f"Question: {r['question']}\nAnswer:" not in r["prompt"][: -len("\nAnswer:")], r["key"]
    # the block's own train items are still asked, with a second block drawn from the rest of the split
    pool = pool_items(outcome.prepared)
    drawn = {it.fact_id for it in draw_exemplars(pool, 2, cfg.base.seed, "regular")}
    alt = [r for r in rows if r["fact_id"] in drawn and r["split"] == "train" and r["shots_asked"] == 2]
    assert len(alt) == 2 and all(r["shots"] == 2 for r in alt)
    assert all(not drawn & {e["fact_id"] for e in r["exemplars"]} for r in alt)


def test_answers_are_the_models_greedy_generation_of_the_prompt(qa_run, tiny):
    """Token-identical to HF `generate(do_sample=False, max_new_tokens=16)` on the recorded prompt
    alone, cut by the same stop rule (the probe's batched shared-prefix decoding changes nothing)."""
    _, out, _ = qa_run
    rows = read_rows(out)
    eos = Generator(tiny.model, tiny.tokenizer).eos_token_ids
    sample = {r["key"]: r for r in rows[::4]}
    sample.update({r["finish_reason"]: r for r in rows})  # one row per way of ending, too
    for r in sample.values():
        ids, text = hf_answer(tiny.model, tiny.tokenizer, r["prompt"], 16, eos)
        assert r["answer_token_ids"] == ids, r["key"]
        assert r["answer"] == text, r["key"]


def test_metrics_json(qa_run):
    _, out, _ = qa_run
    m = read_metrics(out)
    rows = read_rows(out)
    first = [r for r in rows if r["shots_asked"] == 0 and r["split"] == "eval"]  # the first k, eval split
    assert m["n"] == len(first) == 6
    for k in ("em", "f1", "contains"):
        assert m[k] == pytest.approx(sum(r[k] for r in first) / len(first))
    assert set(m["per_relation"]) == {"P36", "P1376"}
    assert m["per_relation"]["P36"]["n"] == 3 and {"em", "f1", "contains", "n_empty"} <= set(m["per_relation"]["P36"])
    assert set(m["per_answer_type"]) == {"entity"}
    assert set(m["per_shots"]) == {"0", "2"} and m["per_shots"]["2"]["n"] == 12
    assert m["per_split"]["train"]["n"] == 6 and m["per_split"]["eval"]["n"] == 6
    assert m["shots"] == [0, 2] and m["n_empty"] == sum(r["empty"] for r in first)
    # the relation without a question template is skipped and reported
    assert set(m["dropped_relations"]) == {"P38"} and "no question template" in m["dropped_relations"]["P38"]
    assert any("P38" in n and "no question template" in n for n in m["notes"])


def test_known_unknown_table(qa_run, tiny):
    cfg, out, _ = qa_run
    df = pd.read_parquet(out / "known_unknown.parquet")
    assert list(df.columns) == list(KU_COLUMNS)
    assert {"fact_id", "relation", "model", "model_revision", "answer", "em", "f1", "contains", "known", "split"} <= set(
        df.columns
    )
    rows = {(r["fact_id"], r["split"]): r for r in read_rows(out) if r["shots_asked"] == 2}  # the regular k-shot
    assert len(df) == len(rows) == 12 and set(df["split"]) == {"train", "eval"}
    assert (df["known"] == (df["em"] == 1.0)).all()
    assert set(df["model"]) == {cfg.base.model} and set(df["model_revision"]) == {tiny.revision}
    for rec in df.to_dict("records"):
        r = rows[(rec["fact_id"], rec["split"])]
        assert (rec["answer"], rec["em"], rec["f1"], rec["contains"]) == (r["answer"], r["em"], r["f1"], r["contains"])


def test_the_block_is_the_same_for_every_model(tiny, tiny_model_path, tmp_path):
    """Same data and seed: the tiny llama and the tiny GPT-2 (another tokenizer, no BOS, a 256-token
    window) get the same block and prompts; another seed draws another block."""
    gpt2 = load_model(str(tiny_model_path("gpt2")))
    kw = {"relations": "P36,P1376", "shots": "1", "max_new_tokens": 4}
    a = run_probe(qa_cfg(tiny, **kw), tmp_path / "a", loaded=tiny, progress=False, log=lambda m: None)
    b = run_probe(qa_cfg(gpt2, **kw), tmp_path / "b", loaded=gpt2, progress=False, log=lambda m: None)
    assert [r["prompt"] for r in read_rows(tmp_path / "a")] == [r["prompt"] for r in read_rows(tmp_path / "b")]
    assert a.notes == b.notes == []  # nothing dropped to fit a window
    prepared = get_probe("qa").prepare(qa_cfg(tiny, relations="P36,P1376"))
    blocks = {tuple(it.fact_id for it in draw_exemplars(pool_items(prepared), 2, seed, "regular")) for seed in range(6)}
    assert len(blocks) > 1


def test_a_block_too_long_for_the_window_keeps_its_first_exemplars(tiny_model_path, tmp_path):
    """The stock tiny llama has a 256-token window: a 4-shot block does not fit, so the last
    exemplars are dropped (noted) and the row records how many were used."""
    small = load_model(str(tiny_model_path("llama")))
    assert small.max_length == 256
    cfg = qa_cfg(small, relations="P36,P1376", shots="4")
    out = run_probe(cfg, tmp_path, loaded=small, progress=False, log=lambda m: None)
    rows = read_rows(tmp_path)
    used = rows[0]["shots"]
    assert 0 < used < 4 and all(r["shots"] == used and r["shots_asked"] == 4 for r in rows)
    drawn = [it.fact_id for it in draw_exemplars(pool_items(out.prepared), 4, cfg.base.seed, "regular")]
    assert [e["fact_id"] for e in rows[0]["exemplars"]] == drawn[:used]
    assert any(f"kept the first {used} of 4 exemplars" in n for n in out.notes)
    assert all(len(small.tokenizer(r["prompt"])["input_ids"]) + 16 <= 256 for r in rows)


# ------------------------------------------------------------------ scripted answers
def test_empty_and_whitespace_answers_are_wrong_and_counted(tiny, tmp_path, monkeypatch):
    prepared = get_probe("qa").prepare(qa_cfg(tiny))
    items = [it for its in prepared.items.values() for it in its]
    by_question = {it.question: it for it in items}
    silent = {items[0].question: "", items[1].question: "  \t ", items[2].question: " "}
    right = {it.question: " " + it.gold[0] for it in items[3:5]}
    verbose = {items[5].question: f" It is {items[5].gold[0]}, I think"}  # Contains 1, EM 0: not known
    scripted(monkeypatch, lambda q: silent.get(q, right.get(q, verbose.get(q, " wrong"))))
    out = run_probe(qa_cfg(tiny), tmp_path, loaded=tiny, progress=False, log=lambda m: None)
    rows = {r["question"]: r for r in read_rows(tmp_path)}
    for q in silent:
        r = rows[q]
        assert (r["em"], r["f1"], r["contains"], r["empty"], r["correct"]) == (0.0, 0.0, 0.0, True, False)
        # a whitespace answer equal to a whitespace gold would still be wrong: the gold is never empty
        assert by_question[q].gold[0].strip()
    for q in right:
        assert rows[q]["em"] == 1.0 and not rows[q]["empty"]
    (v,) = verbose
    assert (rows[v]["em"], rows[v]["contains"], rows[v]["empty"]) == (0.0, 1.0, False) and 0 < rows[v]["f1"] < 1
    m = read_metrics(tmp_path)
    assert m["n_empty"] == 3 and m["em"] == pytest.approx(2 / 6) and m["contains"] == pytest.approx(3 / 6)
    assert sum(v["n_empty"] for v in m["per_relation"].values()) == 3
    df = pd.read_parquet(tmp_path / "known_unknown.parquet").set_index("question")
    assert not df.loc[list(silent) + list(verbose), "known"].any() and df.loc[list(right), "known"].all()
    assert out.metrics["n_empty"] == 3


def test_generation_settings_reach_the_generator(tiny, tmp_path, monkeypatch):
    calls = scripted(monkeypatch, lambda q: " x")
    run_probe(qa_cfg(tiny), tmp_path / "default", loaded=tiny, progress=False, log=lambda m: None)
    assert calls and all(c["max_new_tokens"] == 16 and c["stop"] == ("\n", "Question:") for c in calls)
    # every call hands the block over as the shared prefix (its KV is computed once)
    assert all(all(p.startswith(c["shared_prefix"]) for p in c["prompts"]) for c in calls)
    assert all(c["shared_prefix"].startswith(INSTRUCTION_LINE + "\n") for c in calls)
    calls.clear()
    run_probe(qa_cfg(tiny, max_new_tokens=5), tmp_path / "five", loaded=tiny, progress=False, log=lambda m: None)
    assert calls and all(c["max_new_tokens"] == 5 for c in calls)


def test_popularity_buckets_where_the_data_has_popularity(tiny, tmp_path, monkeypatch):
    caps = [
        ("France", "Paris"),
        ("Germany", "Berlin"),
        ("Italy", "Rome"),
        ("Spain", "Madrid"),
        ("Peru", "Lima"),
        ("Japan", "Tokyo"),
        ("Kenya", "Nairobi"),
        ("Chile", "Santiago"),
        ("Egypt", "Cairo"),
        ("Cuba", "Havana"),
        ("Norway", "Oslo"),
        ("Greece", "Athens"),
    ]
    data = tmp_path / "facts.jsonl"
    data.write_text(
        "".join(
            json.dumps({"subject": s, "relation": "P36", "object": o, "popularity": 100 * (i + 1)}) + "\n"
            for i, (s, o) in enumerate(caps)
        ),
        encoding="utf-8",
    )
    scripted(monkeypatch, lambda q: " Paris")
    cfg = RunConfig.from_dict({"probe": "qa", "model": str(tiny.path), "source": "triples", "data": str(data), "shots": "1"})
    run_probe(cfg, tmp_path / "out", loaded=tiny, progress=False, log=lambda m: None)
    m = read_metrics(tmp_path / "out")
    assert m["qa_popularity"] is True
    assert set(m["per_popularity"]) <= {"top-25%", "middle", "bottom-25%"} and len(m["per_popularity"]) >= 2
    assert sum(v["n"] for v in m["per_popularity"].values()) == m["n"]
    assert all(r["popularity"] is not None for r in read_rows(tmp_path / "out"))


# ------------------------------------------------------------------ resume and locking
def test_interrupted_run_resumes_to_the_same_results(tiny, tmp_path):
    cfg = qa_cfg(tiny, relations="P36,P1376", max_facts_per_relation=10, shots="2", max_new_tokens=6)
    full = run_probe(cfg, tmp_path / "full", loaded=tiny, progress=False, log=lambda m: None)
    assert full.n_scored_now > BATCH  # more than one checkpointed batch

    def interrupt(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_probe(cfg, tmp_path / "cut", loaded=tiny, progress=False, log=lambda m: None, on_batch=interrupt)
    ckpt = (tmp_path / "cut" / CHECKPOINT).read_text(encoding="utf-8").splitlines()
    assert len(ckpt) == BATCH and not (tmp_path / "cut" / RESULTS).exists()
    # as if killed in the middle of writing the next batch: a torn last line
    (tmp_path / "cut" / CHECKPOINT).write_text("\n".join(ckpt) + "\n" + ckpt[-1][:30], encoding="utf-8")
    again = run_probe(cfg, tmp_path / "cut", loaded=tiny, progress=False, log=lambda m: None)
    assert again.n_resumed == BATCH and again.n_scored_now == full.n_scored_now - BATCH
    assert read_rows(tmp_path / "cut") == read_rows(tmp_path / "full")
    mf, mc = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "cut")
    for k in ("em", "f1", "contains", "n", "n_empty", "per_relation", "per_answer_type"):
        assert mf[k] == mc[k]
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "full" / "known_unknown.parquet"), pd.read_parquet(tmp_path / "cut" / "known_unknown.parquet")
    )
    # a complete rerun scores nothing
    assert run_probe(cfg, tmp_path / "cut", loaded=tiny, progress=False, log=lambda m: None).n_scored_now == 0


def test_a_second_run_into_the_same_out_is_refused(tiny, tmp_path):
    cfg = qa_cfg(tiny)
    # a live run holds the folder
    with RunFolder(tmp_path, cfg.results_key(), cfg.to_dict()), pytest.raises(FolderBusyError, match="in use by"):
        run_probe(cfg, tmp_path, loaded=tiny, progress=False, log=lambda m: None)
    assert not (tmp_path / RESULTS).exists()


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "template, message",
    [
        ("What is the capital?", "has no [X] slot"),
        ("Is [Y] the capital of [X]?", "has a [Y] slot; a question must not contain the object"),
    ],
)
def test_bad_question_templates_are_refused_naming_file_and_line(tiny, tmp_path, template, message):
    tsv = tmp_path / "templates.tsv"
    tsv.write_text(
        "relation\tanswer_type\ttemplates\n"
        "P1376\tentity\tOf which country is [X] the capital?\n"
        f"P36\tentity\tWhat is the capital of [X]? || {template}\n",
        encoding="utf-8",
    )
    with pytest.raises(DataError) as e:
        run_probe(qa_cfg(tiny, qa_templates=str(tsv)), tmp_path / "out", loaded=tiny, progress=False, log=lambda m: None)
    assert f"{tsv}:3" in str(e.value) and message in str(e.value)
    assert not (tmp_path / "out" / "run_config.json").exists()  # a corrected rerun is not refused


def test_questions_that_give_the_answer_away_are_skipped_and_counted(tiny, tmp_path, monkeypatch):
    """A template that names an object ("Is Paris ...") still asks every other subject; France
    (capital Paris) is skipped, and counted in metrics.json, instead of being asked its answer."""
    tsv = tmp_path / "templates.tsv"
    tsv.write_text(
        "relation\tanswer_type\ttemplates\nP36\tentity\tIs Paris the capital of [X]? If not, which city is?\n", encoding="utf-8"
    )
    reason = "every template's question contains the object"
    kw = {"relations": "P36", "max_facts_per_relation": None, "qa_train_per_relation": None}
    plain = get_probe("qa").prepare(qa_cfg(tiny, **kw))
    france = "P36|FRA|city:Paris"
    asked = [it.fact_id for it in pool_items(plain)] + [it.fact_id for it in plain.items["P36"]]
    assert france in asked
    scripted(monkeypatch, lambda q: " x")
    cfg = qa_cfg(tiny, split="all", qa_templates=str(tsv), **kw)
    run_probe(cfg, tmp_path / "out", loaded=tiny, progress=False, log=lambda m: None)
    rows = read_rows(tmp_path / "out")
    assert france not in {r["fact_id"] for r in rows} and len(rows) == len(asked) - 1
    assert all("Paris" not in r["gold"] for r in rows)
    m = read_metrics(tmp_path / "out")
    skipped = m["qa_skipped"].get("P36", {}).get(reason, 0) + m["qa_train_skipped"].get("P36", {}).get(reason, 0)
    before = sum(plain.info[k].get("P36", {}).get(reason, 0) for k in ("qa_skipped", "qa_train_skipped"))
    assert skipped == before + 1


def test_only_relations_without_templates_is_refused(tiny, tmp_path):
    with pytest.raises(ConfigError, match="P38: no question template"):
        run_probe(qa_cfg(tiny, relations="P38"), tmp_path, loaded=tiny, progress=False, log=lambda m: None)


# ------------------------------------------------------------------ CLI
def test_cli_help_lists_the_qa_options(capsys):
    from factprobe.cli import main

    with pytest.raises(SystemExit) as e:
        main(["probe", "qa", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--shots", "--max-new-tokens", "--split", "--qa-train-per-relation", "--qa-templates"):
        assert flag in text
    assert "{eval,train,all}" in text


@pytest.mark.slow
def test_cli_run_writes_the_files(tiny_model_path, tmp_path):
    exe = Path(sys.executable).parent / "factprobe"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "factprobe.cli"]
    out = tmp_path / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        cmd
        + [
            "probe",
            "qa",
            "--model",
            str(tiny_model_path("llama")),
            "--relations",
            "P36,P1376",
            "--max-facts-per-relation",
            "2",
            "--qa-train-per-relation",
            "2",
            "--shots",
            "0,1",
            "--split",
            "all",
            "--max-new-tokens",
            "4",
            "--out",
            str(out),
            "--no-track",
            "--no-progress",
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("results.jsonl", "metrics.json", "run_config.json", "known_unknown.parquet"):
        assert (out / name).is_file(), name
    assert not (out / CHECKPOINT).exists()
    rows = read_rows(out)
    assert len(rows) == 2 * 8 and all(len(r["answer_token_ids"]) <= 4 for r in rows)
    assert "qa " in proc.stdout and " em " in proc.stdout and "results in" in proc.stdout
    assert json.loads((out / "run_config.json").read_text())["config"]["split"] == "all"


# ------------------------------------------------------------------ the real models
@pytest.mark.real_model
@pytest.mark.parametrize("alias, relations, n", [("smollm2-135m-instruct", "P36,P19", 3), ("gemma-3-270m", "P36", 2)])
def test_real_model_answers_equal_hf_generate(real_model_path, real_data_root, tmp_path, alias, relations, n):
    """SmolLM2-135M-Instruct on LAMA P36 + P19 (3 facts each, 4 shots); Gemma-3-270M on 2 P36 facts.
    A sample of rows: the recorded answer is token-identical to HF greedy `generate` on the recorded
    prompt with max_new_tokens=16, cut by the same stop rule."""
    path = real_model_path(alias)
    loaded = load_model(str(path), device="cpu", dtype="float32")
    cfg = RunConfig.from_dict(
        {
            "probe": "qa",
            "model": str(path),
            "source": "lama",
            "relations": relations,
            "max_facts_per_relation": n,
            "shots": "4",
            "qa_train_per_relation": 5,
            "device": "cpu",
            "dtype": "float32",
        }
    )
    outcome = run_probe(cfg, tmp_path / "out", loaded=loaded, progress=False, log=lambda m: None)
    rows = read_rows(tmp_path / "out")
    assert len(rows) == n * len(relations.split(","))
    assert all(r["shots"] == 4 and r["prompt"].startswith(INSTRUCTION_LINE + "\n") for r in rows)
    eos = Generator(loaded.model, loaded.tokenizer).eos_token_ids
    for r in {r["relation"]: r for r in rows}.values():  # one row per relation
        ids, text = hf_answer(loaded.model, loaded.tokenizer, r["prompt"], 16, eos)
        assert r["answer_token_ids"] == ids, r["key"]
        assert r["answer"] == text, r["key"]
    m = outcome.metrics
    assert 0.0 <= m["em"] <= m["contains"] <= 1.0 and m["model_revision"] == loaded.revision
    assert not loaded.is_random
