"""The counterfactual ICL probe (yuan2024 sections 4.1-4.2, Figures 6-7) end to end through `run_probe`.

The logic tests replace `Generator.greedy` by a scripted answerer (`scripted` from test_qa) that
"knows" a chosen set of facts, so which train facts are known and unknown, and hence every block,
is determined by the test; the model (a tiny RANDOM llama whose window is widened so that k-shot
blocks fit) only tokenizes. One test runs the tiny model's real generation through every phase.
Numbers from these models are never results.
"""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from factprobe.datasets.counterfactual import correct_object_keys, draw_exemplars
from factprobe.datasets.known_unknown import FILE_NAME
from factprobe.datasets.qa import qa_train_items
from factprobe.errors import ConfigError
from factprobe.framework.checkpoint import RESULTS
from factprobe.framework.config import RunConfig
from factprobe.framework.registry import get_probe
from factprobe.framework.runner import run_probe
from factprobe.metrics.qa import exact_match
from factprobe.models import load_model
from factprobe.probes.counterfactual import FIGURE7_SETTINGS, CounterfactualConfig
from factprobe.probes.qa import BATCH, exemplar_block, pool_items, qa_prompt
from tests.probes.test_qa import INSTRUCTION_LINE, read_metrics, read_rows, scripted, widened_tiny_llama

SHOTS = [2, 4, 8]
KNOWN_SHOTS = 3
EXEMPLAR_FIELDS = {"fact_id", "question", "shown_answer", "true_answer", "shuffled"}


@pytest.fixture(scope="module")
def tiny(tiny_model_path, tmp_path_factory):
    return load_model(str(widened_tiny_llama(tiny_model_path, tmp_path_factory.mktemp("wide"))))


def cf_cfg(model, probe="counterfactual", **kw) -> RunConfig:
    """countryinfo P36, P1376 and P37 (N-M: official languages), 2 eval facts and 6 train facts each."""
    d = {
        "probe": probe,
        "model": str(model.path),
        "relations": "P36,P1376,P37",
        "max_facts_per_relation": 2,
        "qa_train_per_relation": 6,
    }
    if probe == "counterfactual":
        d.update(shots=",".join(map(str, SHOTS)), known_shots=KNOWN_SHOTS)
    d.update(kw)
    return RunConfig.from_dict(d)


@pytest.fixture(scope="module")
def world(tiny):
    """The prepared data and the scripted model's knowledge: every third train fact (6 of 18) and
    every other eval fact; everything else gets a wrong answer."""
    prepared = get_probe("counterfactual").prepare(cf_cfg(tiny))
    pool = pool_items(prepared)
    evals = [it for its in prepared.items.values() for it in its]
    known = {it.fact_id for it in pool[::3]}
    answers = {it.question: " " + it.gold[0] for it in pool[::3] + evals[::2]}
    return SimpleNamespace(prepared=prepared, pool=pool, evals=evals, known=known, answers=answers)


def run_scripted(monkeypatch, tiny, world, out: Path, cfg=None, **kw):
    scripted(monkeypatch, lambda q: world.answers.get(q, " I do not know"))
    return run_probe(cfg or cf_cfg(tiny), out, loaded=tiny, progress=False, log=lambda m: None, **kw)


@pytest.fixture(scope="module")
def cf_run(tiny, world, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        out = tmp_path_factory.mktemp("cf") / "out"
        outcome = run_scripted(mp, tiny, world, out)
    finally:
        mp.undo()
    return out, outcome


def by_setting(rows) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        if r["split"] == "eval":
            out.setdefault((r["setting"], r["shots_asked"]), []).append(r)
    return out


# ------------------------------------------------------------------ config
def test_config_defaults():
    c = CounterfactualConfig()
    assert c.shots == [10, 15, 20, 32] and c.known_shots == 10 and c.max_new_tokens == 16
    assert c.strict is False and c.known_unknown is None
    assert c.counterfactual_answer == "fact"  # yuan2024 4.1: a random training fact's answer
    with pytest.raises(ConfigError, match="k >= 1"):
        CounterfactualConfig(shots="0,10")
    with pytest.raises(ConfigError, match="counterfactual_answer"):
        CounterfactualConfig(counterfactual_answer="uniform")


def test_cli_help_lists_the_counterfactual_options(capsys):
    from factprobe.cli import main

    with pytest.raises(SystemExit):
        main(["probe", "counterfactual", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in (
        "--shots",
        "--known-shots",
        "--known-unknown",
        "--strict",
        "--no-strict",
        "--max-new-tokens",
        "--exemplar-draws",
    ):
        assert flag in text


# ------------------------------------------------------------------ settings, blocks, rows
def test_every_setting_and_k_is_asked_for_every_eval_fact(cf_run, world):
    out, _ = cf_run
    pool = world.pool
    evals = world.evals
    rows = read_rows(out)
    groups = by_setting(rows)
    want = {("regular", KNOWN_SHOTS), ("counterfactual", KNOWN_SHOTS)} | {(s, k) for s in FIGURE7_SETTINGS for k in SHOTS}
    assert set(groups) == want
    for key, rs in groups.items():
        assert sorted(r["fact_id"] for r in rs) == sorted(it.fact_id for it in evals), key
    # the pool phase: every train fact once, with the regular k0-shot block (or the alt block)
    train = [r for r in rows if r["split"] == "train"]
    assert sorted(r["fact_id"] for r in train) == sorted(it.fact_id for it in pool)
    assert all(r["setting"] == "regular" and r["shots_asked"] == KNOWN_SHOTS for r in train)
    assert len(rows) == len(evals) * len(want) + len(pool) and len({r["key"] for r in rows}) == len(rows)


def test_rows_record_the_exemplars_they_were_prompted_with(cf_run):
    out, _ = cf_run
    for r in read_rows(out):
        assert r["shots"] == len(r["exemplars"])
        assert all(EXEMPLAR_FIELDS <= set(e) for e in r["exemplars"])
        lines = [INSTRUCTION_LINE] + [
            x for e in r["exemplars"] for x in (f"Question: {e['question']}", f"Answer: {e['shown_answer']}")
        ]
        assert r["prompt"] == "\n".join(lines) + f"\nQuestion: {r['question']}\nAnswer:"
        assert r["fact_id"] not in {e["fact_id"] for e in r["exemplars"]}, r["key"]  # never its own answer
        assert e_shuffle_flags_agree(r["exemplars"])


def e_shuffle_flags_agree(exemplars) -> bool:
    return all((e["shown_answer"] != e["true_answer"]) == e["shuffled"] for e in exemplars)


def test_known_and_unknown_blocks_come_from_the_models_own_train_facts(cf_run, world):
    out, outcome = cf_run
    pool = world.pool
    known = world.known
    unknown = {it.fact_id for it in pool} - known
    groups = by_setting(read_rows(out))
    for (setting, k), rs in groups.items():
        exemplars = rs[0]["exemplars"]
        assert all(r["exemplars"] == exemplars for r in rs), "one block per setting and k"
        ids = [e["fact_id"] for e in exemplars]
        if setting.startswith("known"):
            assert set(ids) <= known and len(ids) == min(k, len(known)), (setting, k)
        elif setting.startswith("unknown"):
            assert set(ids) <= unknown and len(ids) == min(k, len(unknown)), (setting, k)
    # the k-blocks of one setting are prefixes of one draw; shuffle and unshuffle ask the same questions
    for kind in ("known", "unknown"):
        draws = [[e["fact_id"] for e in groups[(f"{kind}-unshuffle", k)][0]["exemplars"]] for k in SHOTS]
        assert all(a == b[: len(a)] for a, b in pairwise(draws))
        for k in SHOTS:
            un = groups[(f"{kind}-unshuffle", k)][0]["exemplars"]
            sh = groups[(f"{kind}-shuffle", k)][0]["exemplars"]
            assert [(e["fact_id"], e["question"], e["true_answer"]) for e in un] == [
                (e["fact_id"], e["question"], e["true_answer"]) for e in sh
            ]
            assert all(not e["shuffled"] and e["shown_answer"] == e["true_answer"] for e in un)
            # every relation's pool has other answers: every exemplar of a shuffle block is shuffled
            assert sh and all(e["shuffled"] and e["shown_answer"] != e["true_answer"] for e in sh)
    # k = 8 > 6 known facts: capped, with a note naming the setting
    assert groups[("known-shuffle", 8)][0]["shots"] == len(known) == 6
    notes = outcome.metrics["notes"]
    assert any(n.startswith("known-shuffle@8: the model has 6 known train facts for k=8") and "capped at 6" in n for n in notes)
    assert not any(n.startswith("unknown-") and "capped" in n for n in notes)


def test_regular_and_counterfactual_blocks(cf_run, world):
    """Section 4.1: the regular k0-shot block (the qa probe's, drawn once from the train split) with
    true answers, and the same block with answers shuffled within each relation."""
    out, _ = cf_run
    pool = world.pool
    groups = by_setting(read_rows(out))
    regular = groups[("regular", KNOWN_SHOTS)][0]["exemplars"]
    counter = groups[("counterfactual", KNOWN_SHOTS)][0]["exemplars"]
    assert [e["fact_id"] for e in regular] == [it.fact_id for it in draw_exemplars(pool, KNOWN_SHOTS, 0, "regular")]
    assert [e["question"] for e in counter] == [e["question"] for e in regular]
    assert all(e["shuffled"] for e in counter)
    assert all(not e["shuffled"] for e in regular)


def test_counterfactual_answer_option_reaches_the_shuffle(tiny):
    """The block's shown answers are `shuffle_answers` with the configured draw: a random training
    fact's answer by default, uniform over the distinct answers with `--counterfactual-answer label`
    (P37, official languages, 20 train facts: English and French are shared, so the draws differ)."""
    from factprobe.datasets.counterfactual import shuffle_answers
    from factprobe.framework.base import Session
    from factprobe.probes.qa import regular_block

    probe = get_probe("counterfactual")
    blocks = {}
    for draw in ("fact", "label"):
        cfg = cf_cfg(tiny, relations="P37", qa_train_per_relation=20, known_shots=6, counterfactual_answer=draw)
        prepared = probe.prepare(cfg)
        correct = correct_object_keys([*prepared.facts["test"], *prepared.facts["train"]])
        want = shuffle_answers(regular_block(prepared, 6, 0), qa_train_items(prepared), 0, correct_objects=correct, draw=draw)
        blocks[draw] = probe.open_relation(Session(cfg, tiny, prepared, lambda m: None), "counterfactual@6").exemplars
        assert blocks[draw] == want, draw
    assert [e.shown_answer for e in blocks["fact"]] != [e.shown_answer for e in blocks["label"]]


def test_shuffled_answers_are_never_correct_for_the_exemplars_subject(cf_run, world):
    out, _ = cf_run
    prepared = world.prepared
    pool = world.pool
    items = {it.fact_id: it for it in pool}
    by_rel = qa_train_items(prepared)
    correct = correct_object_keys([*prepared.facts["test"], *prepared.facts["train"]])
    n = 0
    n_m = set()
    for r in read_rows(out):
        for e in r["exemplars"]:
            if not e["shuffled"]:
                continue
            n += 1
            it = items[e["fact_id"]]
            if len(it.gold) > 1:
                n_m.add(it.subject)
            assert e["true_answer"] == it.object and e["shown_answer"] != it.object
            # another answer of the same relation's training facts ...
            same = by_rel[it.relation]
            assert e["shown_answer"] in {o.object for o in same}
            # ... that is no correct answer of the subject: no gold (every correct object, by id) ...
            assert not exact_match(e["shown_answer"], list(it.gold), it.answer_type), (it.gold, e)
            # ... and no label of any of the subject's correct object ids
            ids = correct[(it.relation, it.subject_id or it.subject)]
            assert not {o.object_id for o in same if o.object == e["shown_answer"]} & ids, e
    assert n >= 10
    assert n_m  # subjects with several correct answers (Jersey: English and French) were shuffled too


def test_known_unknown_table_and_metrics(cf_run, world, tiny):
    out, _ = cf_run
    pool = world.pool
    evals = world.evals
    known = world.known
    df = pd.read_parquet(out / FILE_NAME)
    assert {"fact_id", "relation", "model", "model_revision", "answer", "em", "f1", "contains", "known", "split"} <= set(
        df.columns
    )
    assert (df["known"] == (df["em"] == 1.0)).all()
    train = df[df["split"] == "train"]
    assert set(train.loc[train["known"], "fact_id"]) == known
    assert set(train["fact_id"]) == {it.fact_id for it in pool}
    assert set(df.loc[df["split"] == "eval", "fact_id"]) == {it.fact_id for it in evals}
    assert set(df["model_revision"]) == {tiny.revision}
    m = read_metrics(out)
    assert (m["n_known_train"], m["n_unknown_train"]) == (6, 12)
    groups = by_setting(read_rows(out))
    assert [(f["setting"], f["shots"]) for f in m["figure7"]] == [(s, k) for s in FIGURE7_SETTINGS for k in SHOTS]
    for f in m["figure7"]:
        rs = groups[(f["setting"], f["shots"])]
        assert f["em"] == pytest.approx(sum(r["em"] for r in rs) / len(rs))
        assert f["shots_used"] == rs[0]["shots"]
    for name in ("regular", "counterfactual"):
        rs = groups[(name, KNOWN_SHOTS)]
        assert m[name]["em"] == pytest.approx(sum(r["em"] for r in rs) / len(rs))
        assert set(m[name]["per_relation"]) == {"P36", "P1376", "P37"}
    assert m["em"] == m["regular"]["em"] and m["n"] == len(evals)
    assert m["settings"]["counterfactual@3"]["shuffled_exemplars"] == KNOWN_SHOTS
    assert m["regular"]["em"] == pytest.approx(len(evals[::2]) / len(evals))  # the script's eval knowledge


def test_strict_refuses_a_k_larger_than_the_known_facts(tiny, world, tmp_path, monkeypatch):
    with pytest.raises(ConfigError) as e:
        run_scripted(monkeypatch, tiny, world, tmp_path, cf_cfg(tiny, strict=True))
    msg = str(e.value)
    assert msg.startswith("known-unshuffle@8: the model has 6 known train facts for k=8") and "--strict refuses" in msg


# ------------------------------------------------------------------ exemplar draws (issue 37 item 1)
def test_exemplar_draws_must_be_positive_and_decide_the_results_key(tiny):
    for bad in (0, 101, 10**9, True, 2.0):  # a huge count would build every question's task 10**9 times
        with pytest.raises(ConfigError, match="exemplar_draws"):
            CounterfactualConfig(exemplar_draws=bad)
    assert CounterfactualConfig(exemplar_draws=100).exemplar_draws == 100
    assert CounterfactualConfig().exemplar_draws == 1
    assert cf_cfg(tiny).results_key() != cf_cfg(tiny, exemplar_draws=2).results_key()


def test_every_question_is_asked_with_every_exemplar_draw(tiny, world, cf_run, tmp_path, monkeypatch):
    out = tmp_path / "draws"
    outcome = run_scripted(monkeypatch, tiny, world, out, cf_cfg(tiny, exemplar_draws=2))
    rows = [r for r in read_rows(out) if r["split"] == "eval"]
    assert len({r["key"] for r in read_rows(out)}) == len(read_rows(out))
    blocks: dict[tuple[str, int, int], list] = {}
    for r in rows:
        blocks.setdefault((r["setting"], r["shots_asked"], r["draw"]), []).append(r)
    fig7 = {key: rs for key, rs in blocks.items() if key[0] in FIGURE7_SETTINGS}
    assert {key[2] for key in fig7} == {0, 1} and len(fig7) == 2 * len(FIGURE7_SETTINGS) * len(SHOTS)
    for key, rs in fig7.items():
        assert sorted(r["fact_id"] for r in rs) == sorted(it.fact_id for it in world.evals), key
        assert all(r["exemplars"] == rs[0]["exemplars"] for r in rs), "one block per setting, k and draw"
    assert all(r["draw"] == 0 for (s, _, _), rs in blocks.items() if s not in FIGURE7_SETTINGS for r in rs)
    ids = {key: [e["fact_id"] for e in rs[0]["exemplars"]] for key, rs in fig7.items()}
    one = by_setting(read_rows(cf_run[0]))  # the exemplar_draws = 1 run: draw 0 is its draw
    for s in FIGURE7_SETTINGS:
        for k in SHOTS:
            assert fig7[(s, k, 0)][0]["exemplars"] == one[(s, k)][0]["exemplars"], (s, k)
            assert ids[(s, k, 1)] == ids[(s.split("-")[0] + "-unshuffle", k, 1)]  # shuffle and unshuffle: one draw
        assert all(ids[(s, a, 1)] == ids[(s, b, 1)][: len(ids[(s, a, 1)])] for a, b in pairwise(SHOTS))  # prefixes
    assert ids[("unknown-unshuffle", 4, 1)] != ids[("unknown-unshuffle", 4, 0)]  # 12 unknown facts: another draw
    fig = {(e["setting"], e["shots"]): e for e in outcome.metrics["figure7"]}
    for s, k, _ in fig7:
        both = fig7[(s, k, 0)] + fig7[(s, k, 1)]
        assert fig[(s, k)]["draws"] == 2 and fig[(s, k)]["n"] == len(both)
        assert fig[(s, k)]["em"] == pytest.approx(sum(r["em"] for r in both) / len(both))
        assert fig[(s, k)]["em_by_draw"] == pytest.approx(
            [sum(r["em"] for r in fig7[(s, k, d)]) / len(fig7[(s, k, d)]) for d in (0, 1)]
        )
    before = read_rows(out)
    again = run_scripted(monkeypatch, tiny, world, out, cf_cfg(tiny, exemplar_draws=2))  # the same config: resumed
    assert again.n_scored_now == 0 and again.already_finished and read_rows(out) == before
    with pytest.raises(ConfigError):  # other draws are another configuration: the folder is refused
        run_scripted(monkeypatch, tiny, world, out, cf_cfg(tiny, exemplar_draws=3))


# ------------------------------------------------------------------ resume
def test_interrupted_run_resumes_to_the_same_results(tiny, world, cf_run, tmp_path, monkeypatch):
    """Interrupted right after the pool phase (known/unknown from the resumed rows), then again in
    the middle of the Figure-7 settings: the rerun gives the rows of the uninterrupted run."""
    full_out, _ = cf_run
    n_pool = len(world.pool)
    stops = iter([n_pool, n_pool + 40])

    stop_at = next(stops)

    def interrupt(done, total):
        if done >= stop_at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scripted(monkeypatch, tiny, world, tmp_path, on_batch=interrupt)
    stop_at = next(stops)
    with pytest.raises(KeyboardInterrupt):
        run_scripted(monkeypatch, tiny, world, tmp_path, on_batch=interrupt)
    again = run_scripted(monkeypatch, tiny, world, tmp_path)
    assert again.n_resumed >= n_pool + 40 - BATCH
    assert read_rows(tmp_path) == read_rows(full_out)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / FILE_NAME), pd.read_parquet(full_out / FILE_NAME))


# ------------------------------------------------------------------ reusing a known/unknown table
@pytest.fixture(scope="module")
def qa_table(tiny, world, tmp_path_factory):
    """The table of `qa --split all --shots KNOWN_SHOTS` on the same data (the pipeline's first step)."""
    mp = pytest.MonkeyPatch()
    try:
        out = tmp_path_factory.mktemp("qa-all")
        run_scripted(mp, tiny, world, out, cf_cfg(tiny, probe="qa", split="all", shots=str(KNOWN_SHOTS)))
    finally:
        mp.undo()
    return out / FILE_NAME


def test_reused_table_gives_the_same_blocks_without_a_pool_phase(tiny, world, cf_run, qa_table, tmp_path, monkeypatch):
    full_out, _ = cf_run
    out = run_scripted(monkeypatch, tiny, world, tmp_path, cf_cfg(tiny, known_unknown=str(qa_table.parent)))
    rows = read_rows(tmp_path)
    assert all(r["split"] == "eval" for r in rows)
    assert rows == [r for r in read_rows(full_out) if r["split"] == "eval"]
    m = out.metrics
    assert m["known_unknown_reused"] == str(qa_table.parent) and (m["n_known_train"], m["n_unknown_train"]) == (6, 12)
    # the written table keeps the reused train rows (the fine-tuning sets draw from them)
    df = pd.read_parquet(tmp_path / FILE_NAME)
    old = pd.read_parquet(qa_table)
    assert set(df.loc[df["split"] == "train", "fact_id"]) == set(old.loc[old["split"] == "train", "fact_id"])


def test_a_missing_table_names_the_command_that_makes_one(tiny, tmp_path):
    cfg = cf_cfg(tiny, known_unknown=str(tmp_path / "nope"))
    with pytest.raises(ConfigError) as e:
        run_probe(cfg, tmp_path / "out", loaded=None, progress=False, log=lambda m: None)  # refused before loading
    msg = str(e.value)
    assert msg.startswith(f"no known/unknown table at {tmp_path / 'nope'}")
    assert f"factprobe probe qa --split all --shots {KNOWN_SHOTS} --model {tiny.path}" in msg
    assert "counterfactual_icl" in msg and "\n" not in msg
    assert not (tmp_path / "out" / "run_config.json").exists()


def test_a_table_of_another_model_is_refused(tiny, qa_table, tmp_path):
    df = pd.read_parquet(qa_table)
    df["model"] = "smollm2-135m-instruct"
    other = tmp_path / FILE_NAME
    df.to_parquet(other)
    with pytest.raises(ConfigError) as e:
        run_probe(cf_cfg(tiny, known_unknown=str(other)), tmp_path / "out", loaded=None, progress=False, log=lambda m: None)
    msg = str(e.value)
    assert f"is the known/unknown table of smollm2-135m-instruct, not of {tiny.path}" in msg
    assert "factprobe probe qa --split all" in msg and "counterfactual_icl" in msg


def test_a_table_of_other_weights_is_refused(tiny, world, qa_table, tmp_path, monkeypatch):
    df = pd.read_parquet(qa_table)
    df["model_revision"] = "local-sha256:" + "0" * 64
    other = tmp_path / FILE_NAME
    df.to_parquet(other)
    with pytest.raises(
        ConfigError,
        match=r"made with revision local-sha256:0+ of .*but the loaded weights are "
        r"local-sha256:",
    ):
        run_scripted(monkeypatch, tiny, world, tmp_path / "out", cf_cfg(tiny, known_unknown=str(other)))
    assert not (tmp_path / "out" / RESULTS).exists()
    # refused before anything is written: the corrected rerun (the right table) into the same
    # folder is a fresh run, not "a different configuration"
    assert not (tmp_path / "out" / "run_config.json").exists()
    run_scripted(monkeypatch, tiny, world, tmp_path / "out", cf_cfg(tiny, known_unknown=str(qa_table)))
    assert (tmp_path / "out" / RESULTS).exists()


def test_a_table_without_train_facts_is_refused(tiny, world, tmp_path, monkeypatch):
    run_scripted(monkeypatch, tiny, world, tmp_path / "qa", cf_cfg(tiny, probe="qa", shots=str(KNOWN_SHOTS)))
    with pytest.raises(ConfigError, match=r"covers none of this run's 18 train-split facts .*--split all"):
        run_probe(
            cf_cfg(tiny, known_unknown=str(tmp_path / "qa")), tmp_path / "out", loaded=None, progress=False, log=lambda m: None
        )


# ------------------------------------------------------------------ the tiny model's own generation
def test_tiny_model_runs_every_phase(tiny_model_path, tmp_path):
    """No script: the tiny RANDOM llama (stock 256-token window) generates every answer. It knows
    nothing, so the known settings get no exemplars (capped at 0, noted)."""
    small = load_model(str(tiny_model_path("llama")))
    cfg = cf_cfg(small, relations="P36,P1376", shots="1,2", known_shots=1, qa_train_per_relation=3, max_new_tokens=4)
    out = run_probe(cfg, tmp_path, loaded=small, progress=False, log=lambda m: None)
    rows = read_rows(tmp_path)
    groups = by_setting(rows)
    assert set(groups) == {("regular", 1), ("counterfactual", 1)} | {(s, k) for s in FIGURE7_SETTINGS for k in (1, 2)}
    assert all(1 <= len(r["answer_token_ids"]) <= 4 and "\n" not in r["answer"] for r in rows)
    known = {r["fact_id"] for r in rows if r["split"] == "train" and r["em"] == 1.0}
    for (setting, k), rs in groups.items():
        if setting.startswith("known"):
            assert rs[0]["shots"] == min(k, len(known))
        assert all(r["prompt"] == qa_prompt(exemplar_block([_Shown(e) for e in r["exemplars"]]), r["question"]) for r in rs)
    assert out.metrics["n_known_train"] + out.metrics["n_unknown_train"] == 6
    assert (tmp_path / FILE_NAME).is_file()


class _Shown:
    def __init__(self, d: dict):
        self.question, self.shown_answer = d["question"], d["shown_answer"]


def test_intervals_over_several_draws_cover_the_draw_not_rows_as_independent():
    """Two draws x four questions, EM by hand: draw means 0.75 and 0.25, question means 1, 0.5, 0.5, 0;
    var(draw means)/2 = 0.125/2, var(question means)/4 = (1/6)/4: half-width t(1) * sqrt(0.0625 + 0.041667)
    = 12.706 * 0.32275, clipped to [0, 1]. A bootstrap over the 8 rows as independent items is narrower."""
    from factprobe.metrics.qa import score_intervals
    from factprobe.probes.counterfactual import CounterfactualProbe

    em = {0: [1, 1, 1, 0], 1: [1, 0, 0, 0]}
    by = {d: [{"fact_id": f"q{i}", "em": v, "f1": v, "contains": v} for i, v in enumerate(vals)] for d, vals in em.items()}
    out = CounterfactualProbe._crossed_intervals(by)
    assert out["ci_method"].startswith("crossed t-interval")
    assert out["em_ci"] == [0.0, 1.0]  # 0.5 -/+ 4.10: the two draws disagree, and the interval says so
    rows = pd.DataFrame([r for rs in by.values() for r in rs])
    naive = score_intervals(rows)["em_ci"]
    assert naive[1] - naive[0] < 0.8  # what the rows-as-independent bootstrap claimed

    vals = [1] * 20 + [0] * 20  # three draws that agree: the question term alone, t at 2 degrees of freedom
    same = {d: [{"fact_id": f"q{i}", "em": v, "f1": v, "contains": v} for i, v in enumerate(vals)] for d in (0, 1, 2)}
    lo, hi = CounterfactualProbe._crossed_intervals(same)["em_ci"]
    half = 4.30265 * math.sqrt((10 / 39) / 40)  # var of 20 ones and 20 zeros (ddof 1) = 10/39
    assert (lo, hi) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-4)
