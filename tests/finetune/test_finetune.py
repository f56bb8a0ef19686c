"""Fine-tuning (factprobe.finetune): DeepSpeed ZeRO 0-3 with and without LoRA on CPU/gloo, answer-only
loss, packing without cross-attention, resume, bad input, and one real SmolLM2 LoRA run.

The tiny llama has RANDOM weights (never a result); it trains on real countryinfo QA facts.
The first DeepSpeed run of a machine compiles a small op (~40 s, cached in TORCH_EXTENSIONS_DIR).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from factprobe.errors import ConfigError, DataError
from factprobe.finetune import FinetuneConfig, run_finetune
from factprobe.finetune.data import IGNORE, Collator, no_kv_cache, pack_sequences, tokenize_examples
from factprobe.finetune.sets import TrainExample, build_train_set, check_no_overlap, make_example


def tiny_cfg(model: Path, out: Path, **kw) -> FinetuneConfig:
    """16 real regular examples, one optimizer step = the whole set (so the loss must fall)."""
    base = {
        "model": str(model),
        "train_set": "regular",
        "train_size": 16,
        "batch_size": 8,
        "grad_accum": 2,
        "max_steps": 3,
        "learning_rate": 3e-3,
        "lr_scheduler": "constant",
        "zero_stage": 2,
        "lora_r": 4,
        "save_steps": 100,
        "max_seq_len": 256,
        "device": "cpu",
        "out": str(out),
    }
    base.update(kw)
    return FinetuneConfig(**base)


@pytest.fixture(scope="module")
def tiny(tiny_model_path) -> Path:
    return tiny_model_path("llama")


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny)


def examples(n: int = 3) -> list[TrainExample]:
    return build_train_set("regular", model="m", size=n).examples


# ------------------------------------------------------------------ the plan of one run
def test_plan_is_worked_out_before_anything_is_written(tiny, tmp_path):
    import dataclasses

    from factprobe.finetune.trainer import TrainPlan, plan_training

    cfg = tiny_cfg(tiny, tmp_path / "out")
    plan = plan_training(cfg)
    assert not (tmp_path / "out").exists()  # planning writes nothing
    assert isinstance(plan, TrainPlan) and plan.cfg is cfg
    assert (plan.out, plan.target) == (tmp_path / "out", tmp_path / "out" / "adapter")
    assert (plan.device, plan.precision, plan.rank, plan.world, plan.accum, plan.per_step) == ("cpu", "float32", 0, 1, 2, 16)
    assert plan.resume_from is None and plan.start_step == 0
    assert plan.digest == plan.train_set.digest == plan.saved_config["train_set_digest"]
    assert len(plan.seqs) == len(plan.rows) == 16 and plan.random_weights is True  # no packing: one example per row
    assert 0 < plan.trainable < plan.total and plan.ds_config["zero_optimization"]["stage"] == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.accum = 4  # type: ignore[misc]


# ------------------------------------------------------------------ training with every ZeRO stage
@pytest.mark.slow  # DeepSpeed training (the first JIT build of its CPU ops in a fresh venv takes 119-191 s CPU)
@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_every_zero_stage_trains_and_loss_falls(tiny, tokenizer, tmp_path, stage, lora):
    lr = 1e-2 if lora else 1e-3
    m = run_finetune(
        tiny_cfg(tiny, tmp_path, zero_stage=stage, lora_r=4 if lora else 0, learning_rate=lr, max_steps=2), progress=False
    )
    assert m["deepspeed_zero_stage"] == stage  # the DeepSpeed engine really ran this stage
    assert m["steps"] == 2 and m["world_size"] == 1 and m["effective_batch"] == 16
    assert m["final_loss"] < m["first_loss"], m
    # each step is the whole set (16 examples = 8 x 2): exactly twice its tokens were trained
    seqs = tokenize_examples(tokenizer, build_train_set("regular", model=str(tiny), size=16).examples, 256)
    assert m["tokens_trained"] == 2 * sum(len(s.input_ids) for s in seqs)
    assert m["random_weights"] is True
    folder = tmp_path / ("adapter" if lora else "model")
    assert (folder / ("adapter_config.json" if lora else "config.json")).is_file()
    assert 0 < m["trainable_fraction"] < 0.5 if lora else m["trainable_fraction"] == 1.0
    for f in ("metrics.json", "trainer_state.json", "loss_history.json", "loss.png", "train_set.jsonl", "train_set.json"):
        assert (tmp_path / f).is_file(), f
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert set(saved) >= {"train_loss", "tokens_per_second", "peak_memory_bytes", "non_padding_fraction"}
    assert saved["train_set_digest"] == json.loads((tmp_path / "train_set.json").read_text())["digest"]
    assert len(json.loads((tmp_path / "loss_history.json").read_text())) == 2


@pytest.mark.slow  # DeepSpeed training (the first JIT build of its CPU ops in a fresh venv takes 119-191 s CPU)
@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_zero3_with_optimizer_and_parameter_offload_trains(tiny, tmp_path, lora):
    """--offload-optimizer and --offload-param reach the running DeepSpeed engine (CPU offload of the
    optimizer state and of the parameters under ZeRO-3), and training still lowers the loss."""
    m = run_finetune(
        tiny_cfg(
            tiny,
            tmp_path,
            zero_stage=3,
            lora_r=4 if lora else 0,
            learning_rate=1e-2 if lora else 1e-3,
            max_steps=2,
            offload_optimizer=True,
            offload_param=True,
        ),
        progress=False,
    )
    assert m["deepspeed_zero_stage"] == 3
    assert m["deepspeed_offload_optimizer"] == "cpu" and m["deepspeed_offload_param"] == "cpu"
    assert m["final_loss"] < m["first_loss"], m


@pytest.mark.slow  # DeepSpeed training (the first JIT build of its CPU ops in a fresh venv takes 119-191 s CPU)
def test_adapter_loads_as_probe_model_and_changes_logits(tiny, tmp_path):
    import os

    from factprobe.models import load_model

    launcher = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "DS_ACCELERATOR")
    before = {k: os.environ.get(k) for k in launcher}
    run_finetune(tiny_cfg(tiny, tmp_path, max_steps=2, learning_rate=5e-2), progress=False)
    # the one-process group's variables are taken back: a subprocess started next (lm-eval, a served model)
    # must not join this process's gloo store (it failed with EADDRINUSE on the port this process holds)
    assert {k: os.environ.get(k) for k in launcher} == before
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str(tiny.resolve())
    tuned, base = load_model(str(tmp_path / "adapter"), device="cpu"), load_model(str(tiny), device="cpu")
    ids = base.tokenizer("Question: What is the capital of France?\nAnswer:", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        diff = (tuned.model(ids).logits - base.model(ids).logits).abs().max().item()
    assert diff > 1e-4


# ------------------------------------------------------------------ labels and packing
def test_only_answer_tokens_carry_loss(tokenizer):
    exs = examples(3)
    seqs = tokenize_examples(tokenizer, exs, 256)
    for ex, s in zip(exs, seqs):
        prompt = tokenizer(ex.prompt)["input_ids"]
        assert s.input_ids[: len(prompt)] == prompt
        assert s.labels[: len(prompt)] == [IGNORE] * len(prompt)
        answer = [t for t in s.labels if t != IGNORE]
        assert tokenizer.decode(answer) == ex.target == f" {ex.answer}\n"
    rows = pack_sequences(seqs, 256 * 3)
    assert len(rows) == 1 and rows[0].n_examples == 3
    assert [t for t in rows[0].labels if t != IGNORE] == [t for s in seqs for t in s.labels if t != IGNORE]
    batch = Collator(pad_id=tokenizer.pad_token_id)([rows[0].to_dict()])
    assert "attention_mask" not in batch and batch["position_ids"][0].tolist() == rows[0].position_ids


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_logits_equal_unpacked(tiny, tokenizer, attn):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32, attn_implementation=attn)
    no_kv_cache(model)  # as the trainer does: with a KV cache transformers does not split packed rows
    seqs = tokenize_examples(tokenizer, examples(3), 256)
    rows = pack_sequences(seqs, 10_000)
    short = pack_sequences(seqs[:1], 10_000)  # collated next to the long row: it gets a padding tail
    assert len(rows) == 1 and rows[0].n_examples == 3
    coll = Collator(pad_id=tokenizer.pad_token_id)
    batch = coll([rows[0].to_dict(), short[0].to_dict()])
    assert "attention_mask" not in batch
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
        start = 0
        for s in seqs:
            alone = model(input_ids=torch.tensor([s.input_ids])).logits[0]
            assert (logits[0, start : start + len(s.input_ids)] - alone).abs().max().item() < 1e-4
            start += len(s.input_ids)
        first = model(input_ids=torch.tensor([seqs[0].input_ids])).logits[0]
        assert (logits[1, : len(seqs[0].input_ids)] - first).abs().max().item() < 1e-4
        # control: the same row as one causal sequence (no restarts) lets example 2 see example 1
        plain = model(input_ids=batch["input_ids"][:1]).logits[0]
        n0, n1 = len(seqs[0].input_ids), len(seqs[1].input_ids)
        assert (plain[n0 : n0 + n1] - logits[0, n0 : n0 + n1]).abs().max().item() > 1e-3
    assert coll.non_padding_fraction < 1.0


# ------------------------------------------------------------------ resume
@pytest.mark.slow  # DeepSpeed training (the first JIT build of its CPU ops in a fresh venv takes 119-191 s CPU)
def test_resume_gives_the_same_next_step_loss(tiny, tmp_path):
    from transformers import TrainerCallback

    class StopAt2(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 2:
                control.should_training_stop = True

    kw = {"max_steps": 4, "save_steps": 2, "train_size": 32, "grad_accum": 1, "lr_scheduler": "cosine", "packing": True}
    run_finetune(tiny_cfg(tiny, tmp_path / "whole", **kw), progress=False)
    run_finetune(tiny_cfg(tiny, tmp_path / "killed", **kw), progress=False, callbacks=[StopAt2()])
    assert (tmp_path / "killed" / "checkpoints" / "checkpoint-2").is_dir()
    (tmp_path / "killed" / "metrics.json").unlink()  # a killed run never writes it (a finished folder is refused)
    resumed = run_finetune(tiny_cfg(tiny, tmp_path / "killed", **kw), progress=False)
    assert resumed["resumed_from"].endswith("checkpoint-2") and resumed["steps"] == 4
    a = json.loads((tmp_path / "whole" / "loss_history.json").read_text())
    b = json.loads((tmp_path / "killed" / "loss_history.json").read_text())
    assert [h["step"] for h in b] == [1, 2, 3, 4]
    assert b[2]["loss"] == pytest.approx(a[2]["loss"], abs=1e-5)
    assert b[3]["loss"] == pytest.approx(a[3]["loss"], abs=1e-5)
    # a resume with another configuration or model is refused, naming both (a killed folder: no metrics.json)
    (tmp_path / "killed" / "metrics.json").unlink()
    with pytest.raises(ConfigError, match=r"learning_rate: checkpoint 0\.003, this run 0\.001"):
        run_finetune(tiny_cfg(tiny, tmp_path / "killed", **{**kw, "learning_rate": 1e-3}), progress=False)
    with pytest.raises(ConfigError, match=r"model: checkpoint '.*tiny-random-llama', this run 'smollm2-135m-instruct'"):
        run_finetune(tiny_cfg("smollm2-135m-instruct", tmp_path / "killed", **kw), progress=False)


# ------------------------------------------------------------------ training sets
def _table(pool, model: str, path: Path, eval_ids=()) -> Path:
    from factprobe.datasets.known_unknown import known_unknown_table

    rows = [
        {
            "fact_id": it.fact_id,
            "relation": it.relation,
            "subject": it.subject,
            "question": it.question,
            "split": "train",
            "shots": 10,
            "answer": it.object if i % 3 else "x",
            "em": float(i % 3 != 0),
            "f1": 0.0,
            "contains": 0.0,
        }
        for i, it in enumerate(pool)
    ]
    rows += [{**rows[0], "fact_id": fid} for fid in eval_ids]
    known_unknown_table(rows, model, "rev").to_parquet(path)
    return path


def test_known_unknown_mixed_sets(tmp_path):
    from factprobe.datasets.qa import prepare_qa, qa_train_items
    from factprobe.framework.config import BaseConfig

    prepared = prepare_qa(BaseConfig(), max_train_per_relation=50)
    pool = [it for its in qa_train_items(prepared).values() for it in its]
    table = _table(pool, "m", tmp_path / "ku.parquet")
    sets = {k: build_train_set(k, model="m", known_unknown=str(table)) for k in ("known", "unknown", "mixed")}
    n = min(sets["known"].info["n_known"], sets["known"].info["n_unknown"])
    assert n > 10 and all(len(s) == n for s in sets.values())
    assert all(e.known for e in sets["known"].examples) and not any(e.known for e in sets["unknown"].examples)
    assert sum(e.known for e in sets["mixed"].examples) == n // 2
    assert build_train_set("mixed", model="m", known_unknown=str(table)).digest == sets["mixed"].digest
    # another seed is another split: this table's train facts are then evaluation facts, refused
    with pytest.raises(ConfigError, match="lists .* evaluation fact"):
        build_train_set("mixed", model="m", known_unknown=str(table), seed=1)
    small = build_train_set("known", model="m", known_unknown=str(table), size=8)
    assert len(small) == 8 and small.digest != sets["known"].digest
    # the regular set never holds an eval fact; the counterfactual set is it with shuffled answers
    reg = build_train_set("regular", model="m", size=40)
    assert build_train_set("regular", model="m", size=40).digest == reg.digest
    assert build_train_set("regular", model="m", size=40, seed=1).digest != reg.digest
    cf = build_train_set("counterfactual", model="m", size=40)
    evals = [it for its in prepared.items.values() for it in its]
    check_no_overlap(reg.examples, evals)
    assert [e.fact_id for e in cf.examples] == [e.fact_id for e in reg.examples]
    assert all(e.answer != e.true_answer for e in cf.examples if e.shuffled) and sum(e.shuffled for e in cf.examples) > 30
    by_rel = {}
    for e in reg.examples:
        by_rel.setdefault(e.relation, set()).add(e.true_answer)
    assert all(e.answer in {it.object for it in pool if it.relation == e.relation} for e in cf.examples)
    # saved and read back with its digest
    cf.save(tmp_path / "cf")
    assert type(cf).load(tmp_path / "cf").digest == cf.digest
    from factprobe.finetune import build_train_set_for

    assert build_train_set_for(FinetuneConfig(train_set="counterfactual", train_set_dir=str(tmp_path / "cf"))).digest == cf.digest
    with pytest.raises(ConfigError, match="holds a 'counterfactual' training set, but --train-set is 'regular'"):
        build_train_set_for(FinetuneConfig(train_set="regular", train_set_dir=str(tmp_path / "cf")))
    (tmp_path / "cf" / "train_set.jsonl").write_text((tmp_path / "cf" / "train_set.jsonl").read_text().replace("Answer", "A"))
    with pytest.raises(DataError, match="digest"):
        type(cf).load(tmp_path / "cf")


# ------------------------------------------------------------------ bad input
def test_overlap_with_evaluation_facts_is_refused(tmp_path):
    from factprobe.datasets.qa import prepare_qa, qa_train_items
    from factprobe.framework.config import BaseConfig

    prepared = prepare_qa(BaseConfig(), max_train_per_relation=50)
    evals = [it for its in prepared.items.values() for it in its]
    with pytest.raises(ConfigError, match=f"overlaps the evaluation facts in 2 fact.*{evals[0].fact_id}"):
        check_no_overlap([make_example(evals[0]), make_example(evals[1])], evals)
    pool = [it for its in qa_train_items(prepared).values() for it in its]
    table = _table(pool, "m", tmp_path / "ku.parquet", eval_ids=[evals[3].fact_id])
    with pytest.raises(ConfigError, match=f"lists 1 evaluation fact.*{evals[3].fact_id}"):
        build_train_set("known", model="m", known_unknown=str(table))


def test_missing_or_foreign_table_names_the_command(tmp_path):
    with pytest.raises(ConfigError, match=r"needs the base model's known/unknown table.*factprobe probe qa --split all"):
        build_train_set("known", model="m")
    with pytest.raises(ConfigError, match=r"no known/unknown table at .*factprobe probe qa --split all"):
        build_train_set("unknown", model="m", known_unknown=str(tmp_path / "nope"))
    from factprobe.datasets.qa import prepare_qa, qa_train_items
    from factprobe.framework.config import BaseConfig

    pool = [it for its in qa_train_items(prepare_qa(BaseConfig(), max_train_per_relation=50)).values() for it in its]
    table = _table(pool, "other-model", tmp_path / "ku.parquet")
    with pytest.raises(ConfigError, match="known/unknown table of other-model, not of m"):
        build_train_set("mixed", model="m", known_unknown=str(table))
    with pytest.raises(ConfigError, match=r"needs 200 known .* the table has \d+ known"):
        build_train_set("known", model="other-model", known_unknown=str(table), size=200)


def test_bad_deepspeed_config_names_the_key(tiny, tmp_path):
    bad = tmp_path / "ds.json"
    bad.write_text(json.dumps({"zero_optimisation": {"stage": 2}}))
    with pytest.raises(ConfigError, match=r"unknown DeepSpeed key 'zero_optimisation' \(did you mean 'zero_optimization'"):
        run_finetune(tiny_cfg(tiny, tmp_path / "o", deepspeed_config=str(bad)), progress=False)
    bad.write_text(json.dumps({"zero_optimization": {"stage": 2, "overlap_com": True}}))
    with pytest.raises(ConfigError, match=r"zero_optimization\.overlap_com"):
        run_finetune(tiny_cfg(tiny, tmp_path / "o", deepspeed_config=str(bad)), progress=False)
    bad.write_text('{"zero_optimization": {"stage": 2,}}')
    with pytest.raises(DataError, match=r"ds\.json:1:\d+: not valid JSON"):
        run_finetune(tiny_cfg(tiny, tmp_path / "o", deepspeed_config=str(bad)), progress=False)
    bad.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": 3,
                "gradient_accumulation_steps": "auto",
                "train_batch_size": "auto",
                "zero_optimization": {"stage": 2},
            }
        )
    )
    with pytest.raises(ConfigError, match="train_micro_batch_size_per_gpu"):
        run_finetune(tiny_cfg(tiny, tmp_path / "o", deepspeed_config=str(bad)), progress=False)


def test_bad_target_modules_and_small_set(tiny, tmp_path):
    with pytest.raises(ConfigError, match=r"qkv_proj not in .*its linear modules are down_proj, gate_proj, k_proj"):
        run_finetune(tiny_cfg(tiny, tmp_path, lora_target_modules="q_proj,qkv_proj"), progress=False)
    with pytest.raises(ConfigError, match=r"16 examples in 16 sequences, fewer than one effective batch of 512"):
        run_finetune(tiny_cfg(tiny, tmp_path, grad_accum=None), progress=False)
    with pytest.raises(ConfigError, match="offload_param.*--zero-stage 3"):
        tiny_cfg(tiny, tmp_path, offload_param=True)


def test_cli_one_line_errors_and_help(capsys):
    from factprobe.cli import main

    assert main(["finetune", "--train-set", "known", "--zero-stage", "3", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: train set 'known' needs") and "factprobe probe qa" in err
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    out = capsys.readouterr().out
    assert "gemma3_text  q_proj, k_proj" in out and "--zero-stage {0,1,2,3}" in out and "deepspeed --num_gpus" in out


# ------------------------------------------------------------------ the real model
@pytest.mark.real_model
@pytest.mark.slow
def test_real_smollm2_lora_run_and_qa_with_the_adapter(real_model_path, real_data_root, tmp_path):
    """SmolLM2 LoRA on counterfactual answers, 2 steps of 4; then `factprobe probe qa --model DIR/adapter`."""
    from factprobe.cli import main

    real_model_path("smollm2-135m-instruct")
    cfg = FinetuneConfig(
        model="smollm2-135m-instruct",
        train_set="counterfactual",
        relations=["P36"],
        train_size=8,
        batch_size=4,
        grad_accum=1,
        max_steps=2,
        learning_rate=5e-3,
        lora_r=8,
        zero_stage=2,
        device="cpu",
        out=str(tmp_path / "ft"),
    )
    m = run_finetune(cfg, progress=False)
    assert m["steps"] == 2 and m["random_weights"] is False and m["lora_r"] == 8
    adapter = tmp_path / "ft" / "adapter"
    answers = {}
    for name, model in (("base", "smollm2-135m-instruct"), ("tuned", str(adapter))):
        assert (
            main(
                [
                    "probe",
                    "qa",
                    "--model",
                    model,
                    "--relations",
                    "P36",
                    "--max-facts-per-relation",
                    "12",
                    "--shots",
                    "0",
                    "--device",
                    "cpu",
                    "--no-track",
                    "--no-progress",
                    "--out",
                    str(tmp_path / name),
                ]
            )
            == 0
        )
        rows = [json.loads(x) for x in (tmp_path / name / "results.jsonl").read_text().splitlines()]
        answers[name] = {r["fact_id"]: r["answer"] for r in rows}
    assert answers["base"].keys() == answers["tuned"].keys() and len(answers["base"]) == 12
    assert any(answers["base"][k] != answers["tuned"][k] for k in answers["base"])


def test_deepspeed_configs_are_auto_and_offload_is_applied():
    from factprobe.finetune.deepspeed_config import config_dir, load_deepspeed_config

    for stage in (0, 1, 2, 3):
        cfg, path = load_deepspeed_config(stage)
        assert path == config_dir() / f"zero{stage}.json" and cfg["zero_optimization"]["stage"] == stage
        # the batch values are never written by hand: the HF integration fills them from the run
        assert all(
            cfg[k] == "auto" for k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")
        )
    cfg, _ = load_deepspeed_config(3, offload_optimizer=True, offload_param=True)
    zero = cfg["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == "cpu" and zero["offload_param"]["device"] == "cpu"
    assert cfg["optimizer"] == {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}
    with pytest.raises(ConfigError, match="zero_optimization.stage is 3 but --zero-stage is 2"):
        load_deepspeed_config(2, str(config_dir() / "zero3.json"))


@pytest.mark.slow
def test_one_writer_and_a_finished_folder_is_not_trained_over(tiny, tmp_path):
    """A second run into a folder that a live run holds fails at once naming the holder; a finished
    folder is refused by default and reused (same configuration only) by a retried pipeline step."""
    import os

    from factprobe.run_folder import LOCK, claim

    cfg = tiny_cfg(tiny, tmp_path, max_steps=1)
    with claim(tmp_path, "finetune", "regular"):
        with pytest.raises(ConfigError, match=rf"is in use by host \S+ pid {os.getpid()} \(a fine-tuning run\)"):
            run_finetune(cfg, progress=False)
    assert not (tmp_path / "metrics.json").exists()
    first = run_finetune(cfg, progress=False)
    with pytest.raises(ConfigError, match="holds a finished fine-tuning run"):
        run_finetune(cfg, progress=False)
    assert run_finetune(cfg, progress=False, if_finished="reuse") == first  # no training: the saved metrics
    other = tiny_cfg(tiny, tmp_path, max_steps=2)
    with pytest.raises(ConfigError, match="made with another configuration"):
        run_finetune(other, progress=False, if_finished="reuse")
    assert not (tmp_path / LOCK).exists()
