"""mc-items on tiny RANDOM models: option log-probs equal a naive full forward per option (slot at
the end, in the middle, at the start; with and without in-context examples), sum/mean, the CLI,
compare and regress of two runs. Random weights: the numbers are never results."""

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from factprobe.cli import main
from factprobe.errors import ConfigError
from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_probe
from factprobe.lm.naive import naive_logprob
from factprobe.probes.mc_items import split_prompt

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "examples" / "mc_items" / "cloze.jsonl"
TRAIN = REPO / "examples" / "mc_items" / "cloze_train.jsonl"


#: six fixture items of two relations, the slot at the end, in the middle and at the start of each
SUBSET = ("cap-fr", "cap-es", "cap-de", "lang-br", "lang-mx", "lang-fr")


@pytest.fixture(scope="module")
def subset(tmp_path_factory) -> Path:
    recs = [json.loads(line) for line in DATA.read_text().splitlines()]
    path = tmp_path_factory.mktemp("items") / "subset.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs if r["id"] in SUBSET))
    return path


def config(model, data: Path = DATA, **params) -> RunConfig:
    return RunConfig.from_dict(
        {"probe": "mc-items", "model": str(model), "data": str(data), "device": "cpu", "dtype": "float32", **params}
    )


def run(cfg: RunConfig, out: Path):
    return run_probe(cfg, out, progress=False, log=lambda m: None)


def position(prompt: str) -> str:
    return "end" if prompt.endswith("[Y]") else "start" if prompt.startswith("[Y]") else "middle"


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def tiny(request, tiny_model_path):
    path = tiny_model_path(request.param)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return path, model, AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("examples", [0, 2])
def test_logprobs_equal_a_naive_forward_per_option_at_every_slot_position(tiny, subset, tmp_path, examples):
    path, model, tok = tiny
    extra = {"train_data": str(TRAIN), "examples": examples} if examples else {}
    outcome = run(config(path, subset, token_budget=64, **extra), tmp_path / "run")
    rows = outcome.results.to_dict("records")
    assert len(rows) == len(SUBSET)
    seen = set()
    for r in rows:
        seen.add(position(r["subject"]))
        _, after = split_prompt(r["subject"])
        for opt, lp, n in zip(r["options"], r["logprobs"], r["option_tokens"]):
            assert lp == pytest.approx(naive_logprob(model, tok, r["context"], opt + after), abs=1e-4), (r["key"], opt)
            ctx = r["context"].rstrip()
            whole = tok(ctx + r["context"][len(ctx) :] + opt + after)["input_ids"]
            assert n == len(whole) - len(tok(ctx)["input_ids"])
        before = r["subject"].split("[Y]")[0]
        if examples:
            assert r["context"].endswith("\n" + before) and r["context"].count("\n") == 2
        elif position(r["subject"]) == "start":
            assert r["context"] == ""  # empty: the scorer's stand-in token, lm-eval's rule (tests/lm/test_bos.py)
        else:
            assert r["context"] == before
    assert seen == {"end", "middle", "start"}
    if examples:  # the examples are filled training items, one cached prefix per relation
        train = [json.loads(line) for line in TRAIN.read_text().splitlines()]
        filled = {
            t["prompt"].replace("[Y]", t["options"][t["answer"]] if isinstance(t["answer"], int) else t["answer"]) for t in train
        }
        for r in rows:
            shown = r["context"].split("\n")[:-1]
            assert len(shown) == 2 and set(shown) <= filled
        assert outcome.metrics["token_savings"] > 0


def test_slot_at_the_end_is_ic_lke_continuation_scoring(tiny, subset, tmp_path):
    path, model, tok = tiny
    row = next(r for r in run(config(path, subset), tmp_path / "run").results.to_dict("records") if r["subject_id"] == "cap-fr")
    assert row["context"] == "The capital of France is "
    assert row["logprobs"][0] == pytest.approx(naive_logprob(model, tok, "The capital of France is", " Paris"), abs=1e-4)


def test_mean_divides_each_sum_by_its_scored_tokens(tiny_model_path, tmp_path):
    path = tiny_model_path("gpt2")
    total = run(config(path), tmp_path / "sum")
    mean = run(config(path, option_score="mean"), tmp_path / "mean")
    assert total.metrics["option_score"] == "sum" and mean.metrics["option_score"] == "mean"
    for s, m in zip(total.results.to_dict("records"), mean.results.to_dict("records")):
        assert m["logprob_sums"] == pytest.approx(s["logprobs"], abs=1e-9)
        assert m["logprobs"] == pytest.approx([v / n for v, n in zip(s["logprobs"], s["option_tokens"])], abs=1e-9)
        assert m["prediction"] == m["options"][max(range(4), key=lambda i: m["logprobs"][i])]
    # lengths differ in the fixture, so the two rules disagree somewhere (the option does something)
    assert any(
        s["prediction"] != m["prediction"] for s, m in zip(total.results.to_dict("records"), mean.results.to_dict("records"))
    )


def test_examples_need_train_data(tiny_model_path, tmp_path):
    with pytest.raises(ConfigError, match="examples=2: in-context examples need --train-data"):
        run(config(tiny_model_path("gpt2"), examples=2), tmp_path / "run")


def test_rows_and_metrics_are_the_multiple_choice_ones(tiny_model_path, tmp_path):
    outcome = run(config(tiny_model_path("gpt2")), tmp_path / "run")
    m = outcome.metrics
    assert set(m["per_relation"]) == {"capital", "language", "geography", "science"}
    assert m["n"] == 20 and 0 <= m["accuracy"] <= 1 and "accuracy_at_k" in m
    r = outcome.results.iloc[0]
    for col in ("options", "logprobs", "prediction", "correct", "relation", "gold_prob", "confidence", "fact_id"):
        assert col in outcome.results.columns
    assert r["fact_id"] == "capital|cap-fr|Paris" and len(r["logprobs"]) == 4


@pytest.mark.parametrize("ext", [".csv", ".parquet", ".json"])
def test_other_formats_give_the_same_rows(tiny_model_path, tmp_path, ext):
    recs = [json.loads(line) for line in DATA.read_text().splitlines()][6:9]
    path = tmp_path / f"items{ext}"
    if ext == ".csv":
        pd.DataFrame([{**r, "options": json.dumps(r["options"]), "answer": str(r["answer"])} for r in recs]).to_csv(
            path, index=False
        )
    elif ext == ".parquet":
        pd.DataFrame([{**r, "answer": str(r["answer"])} for r in recs]).to_parquet(path, index=False)
    else:
        path.write_text(json.dumps(recs))
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in recs))
    model = tiny_model_path("gpt2")
    a = run(config(model, data=str(jsonl)), tmp_path / "a").results
    b = run(config(model, data=str(path)), tmp_path / "b").results
    assert a[["fact_id", "logprobs", "prediction", "correct"]].to_dict("records") == b[
        ["fact_id", "logprobs", "prediction", "correct"]
    ].to_dict("records")


@pytest.mark.slow
def test_cli_compare_and_regress_two_runs(tiny_model_path, subset, tmp_path, capsys):
    """`factprobe probe mc-items` on two models, then `compare` joins them fact by fact and
    `regress` reruns the baseline's mc-items configuration on a candidate model."""
    a, b = tmp_path / "a", tmp_path / "b"
    for model, out in ((tiny_model_path("gpt2"), a), (tiny_model_path("llama"), b)):
        assert (
            main(
                [
                    "probe",
                    "mc-items",
                    "--model",
                    str(model),
                    "--data",
                    str(subset),
                    "--device",
                    "cpu",
                    "--dtype",
                    "float32",
                    "--slot",
                    "[Y]",
                    "--option-score",
                    "mean",
                    "--out",
                    str(out),
                    "--no-track",
                    "--no-progress",
                ]
            )
            == 0
        )
    printed = capsys.readouterr().out
    assert "mc-items" in printed and "capital" in printed  # the per-relation table
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"facts joined: {len(SUBSET)} (only in A: 0, only in B: 0)" in out, out
    rc = main(
        [
            "regress",
            "--candidate",
            str(tiny_model_path("llama")),
            "--baseline",
            str(a),
            "--no-track",
            "--out",
            str(tmp_path / "cand"),
            "--max-drop",
            "0.99",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "PASS" in out, out
    cand = [json.loads(line) for line in (tmp_path / "cand" / "candidate" / "results.jsonl").read_text().splitlines()]
    theirs = [json.loads(line) for line in (b / "results.jsonl").read_text().splitlines()]
    assert [v for r in cand for v in r["logprobs"]] == pytest.approx([v for r in theirs for v in r["logprobs"]], abs=1e-9)
    assert {r["probe"] for r in cand} == {"mc-items"} and "logprob_sums" in cand[0]  # the baseline's --option-score mean


def test_packed_items_with_a_token_merged_across_the_slot_stay_exact(tiny):
    """A slot glued to the text before it (`at 1[Y]`, option `00`) makes the joint tokenization
    rewrite the context's last token: that option is scored as a whole sequence of its own."""
    from factprobe.lm.scorer import Scorer
    from factprobe.probes.mc_items import item_request, score_packed

    _, model, tok = tiny
    scorer = Scorer(model, tok, device="cpu", token_budget=48)
    items = [
        ("Water boils at 1[Y] degrees.", ["00", "50"]),
        ("th[Y] sat down.", ["e cat", "is dog"]),
        ("The capital of France is [Y]", ["Paris", "Lyon"]),
    ]
    requests = [item_request(p, opts, "[Y]") for p, opts in items]
    scores = score_packed(scorer, requests)
    assert scorer.stats.fallbacks >= 2
    for (ctx, conts), s in zip(requests, scores):
        for c, v in zip(conts, s):
            assert v == pytest.approx(naive_logprob(model, tok, ctx, c), abs=1e-4), (ctx, c)
