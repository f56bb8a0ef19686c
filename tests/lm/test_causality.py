"""Issue 28 item 5: a model is causal only if it behaves so (`factprobe.lm.causality.check_causal`).

A BERT saved as `BertLMHeadModel` without `is_decoder` is named a causal LM by its config (and
loads through `AutoModelForCausalLM`), but attends both ways. It is refused by every causal probe
and by `finetune`, whatever its class name says; real causal models (tiny RANDOM llama and gpt2,
an adapter on one) pass. Tiny RANDOM models: numbers are never results.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from factprobe.errors import ConfigError
from factprobe.lm.causality import check_causal, earlier_logit_change, probe_ids, tolerance


def _bert_lm_head(bert: Path, out: Path, is_decoder: bool) -> Path:
    """The tiny RANDOM BERT's weights saved as `BertLMHeadModel` (its tokenizer copied along)."""
    from transformers import BertConfig, BertLMHeadModel

    config = BertConfig.from_pretrained(bert)
    config.is_decoder = is_decoder
    model = BertLMHeadModel.from_pretrained(bert, config=config)
    model.save_pretrained(out)
    for f in bert.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors"):
            shutil.copy2(f, out / f.name)
    return out


@pytest.fixture(scope="module")
def two_way(tiny_model_path, tmp_path_factory) -> Path:
    """BertLMHeadModel WITHOUT is_decoder: a causal-LM class name, two-way attention."""
    return _bert_lm_head(tiny_model_path("bert"), tmp_path_factory.mktemp("bert") / "bert-lm-head", is_decoder=False)


def test_the_two_way_model_claims_to_be_causal(two_way):
    """The premise: its config names a causal-LM class, so the kind read from it is "causal"."""
    from factprobe.models import load_model

    cfg = json.loads((two_way / "config.json").read_text())
    assert cfg["architectures"] == ["BertLMHeadModel"] and not cfg.get("is_decoder")
    assert load_model(str(two_way), device="cpu").kind == "causal"


def test_probe_refuses_a_model_that_attends_to_later_tokens(two_way, tmp_path, capsys):
    from factprobe.cli import main

    rc = main(
        [
            "probe",
            "ic-lke",
            "--model",
            str(two_way),
            "--relations",
            "P36",
            "--max-facts-per-relation",
            "2",
            "--choices",
            "5",
            "--examples",
            "3",
            "--device",
            "cpu",
            "--no-track",
            "--no-progress",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc == 2 and "Traceback" not in err, err
    assert len(lines) == 1, err
    assert f"model {two_way} is not causal: its logits at position 0 change when a later token" in lines[0]
    assert "bidirectional attention" in lines[0] and '"is_decoder": true' in lines[0]
    assert not (tmp_path / "o" / "results.jsonl").exists() and not (tmp_path / "o" / "metrics.json").exists()


@pytest.mark.slow  # builds an adapter
def test_require_kind_checks_behaviour_for_every_probe_that_takes_causal_models(two_way, tiny_model_path, tmp_path):
    """`require_kind` (the one every probe and study calls) refuses it also when masked models are
    accepted too; a masked LM is not run through the causal check."""
    from factprobe.models import load_model, require_kind
    from factprobe.models.testing import make_tiny_lora_adapter

    lm = load_model(str(two_way), device="cpu")
    for accepted in (["causal"], ("causal", "masked")):
        with pytest.raises(ConfigError, match=r"is not causal: its logits at position \d+ change"):
            require_kind(lm, accepted, "ic-lke")
    adapter = make_tiny_lora_adapter(two_way, tmp_path / "lora-on-two-way")
    with pytest.raises(ConfigError, match=rf"^model {adapter} is not causal"):
        require_kind(load_model(str(adapter), device="cpu"), ["causal"], "qa")
    require_kind(load_model(str(tiny_model_path("bert")), device="cpu"), ["masked"], "belief")


@pytest.mark.slow  # builds an adapter
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_causal_models_and_their_adapters_pass(tiny_model_path, tmp_path, kind):
    from factprobe.models import load_model, require_kind
    from factprobe.models.testing import make_tiny_lora_adapter

    lm = load_model(str(tiny_model_path(kind)), device="cpu")
    lm.model.train()  # the check runs in eval mode and gives the mode back
    require_kind(lm, ["causal"], "ic-lke")
    assert lm.model.training and all(m.training for m in lm.model.modules())
    first, change, last = earlier_logit_change(lm.model, lm.tokenizer)
    assert first is None and change == 0.0 and last == 5  # each row computed alone: bit-identical prefixes
    adapter = make_tiny_lora_adapter(tiny_model_path(kind), tmp_path / f"lora-{kind}")
    loaded = load_model(str(adapter), device="cpu")
    require_kind(loaded, ["causal"], "qa")


def test_a_bert_decoder_is_causal(tiny_model_path, tmp_path):
    """The same weights with `is_decoder: true` attend causally: they pass (the check is about
    behaviour, not about the class)."""
    from transformers import AutoModelForCausalLM

    decoder = _bert_lm_head(tiny_model_path("bert"), tmp_path / "bert-decoder", is_decoder=True)
    check_causal(AutoModelForCausalLM.from_pretrained(decoder), "bert-decoder")


def test_probe_ids_and_tolerance():
    ids, other = probe_ids(100, {0, 1, 2, 3})
    assert len(ids) == 6 and other != ids[-1] and not {0, 1, 2, 3} & {*ids, other}
    assert probe_ids(100, {0, 1, 2, 3}) == (ids, other)  # deterministic
    ids, other = probe_ids(2)
    assert other != ids[-1]
    assert tolerance(torch.float32) == 1e-4 and tolerance(torch.bfloat16) == torch.finfo(torch.bfloat16).eps


def test_a_bfloat16_two_way_model_is_refused_too(two_way):
    """The tolerance of half precision (its machine epsilon) still sees two-way attention."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(two_way, dtype=torch.bfloat16)
    with pytest.raises(ConfigError, match="is not causal"):
        check_causal(model, "bf16-bert")


@pytest.mark.real_model
@pytest.mark.parametrize("alias", ["smollm2-135m-instruct", "gemma-3-270m"])
def test_real_models_are_causal(real_model_path, alias):
    """The real aliases pass as they are probed (float32 on the CPU), and so does SmolLM2 in bfloat16."""
    from factprobe.models import load_model, require_kind

    real_model_path(alias)
    lm = load_model(alias, device="cpu", dtype="float32")
    require_kind(lm, ["causal"], "ic-lke")
    assert earlier_logit_change(lm.model, lm.tokenizer)[0] is None
    if alias.startswith("smollm2"):
        require_kind(load_model(alias, device="cpu", dtype="bfloat16"), ["causal"], "ic-lke")


@pytest.mark.slow  # sets up a fine-tuning run
def test_finetune_refuses_a_model_that_attends_to_later_tokens(two_way, tmp_path, capsys):
    """`factprobe finetune` on it: one line, exit 2, nothing trained or written."""
    from factprobe.cli import main

    out = tmp_path / "ft"
    rc = main(
        [
            "finetune",
            "--model",
            str(two_way),
            "--train-set",
            "regular",
            "--train-size",
            "16",
            "--batch-size",
            "8",
            "--grad-accum",
            "2",
            "--max-steps",
            "1",
            "--lora-r",
            "4",
            "--zero-stage",
            "0",
            "--device",
            "cpu",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc == 2 and "Traceback" not in err and len(lines) == 1, err
    assert f"model {two_way} is not causal: its logits at position 0 change when a later token" in lines[0]
    assert not (out / "adapter").exists() and not (out / "metrics.json").exists()
    assert not (out / "checkpoints").exists()
