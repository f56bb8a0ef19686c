"""PEFT adapters: the scorer runs LoRA layers (PeftModel and merged), and `load_model` loads adapter
folders on their base model (alias, local folder or `base_model=` override).

All adapters here are tiny LoRA adapters with NON-ZERO random weights (`init_lora_weights=False`)
on tiny RANDOM models; their numbers are only used for equality checks, never as results.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from factprobe.errors import ConfigError, ModelError
from factprobe.lm.body import decoder_parts, unwrap_peft
from factprobe.lm.naive import naive_logprob
from factprobe.lm.scorer import ChoiceRequest, Scorer
from factprobe.models import hub, load_model
from factprobe.models.aliases import get_spec
from factprobe.models.testing import make_tiny_lora_adapter
from factprobe.paths import cache_root

REAL_CACHE_ROOT = cache_root()

TOL = 1e-4
PREFIX = "France Paris Spain Madrid Japan Tokyo"
REQUESTS = [
    ChoiceRequest(PREFIX + " Germany", [" Berlin", " Bern", " Bonn am Rhein"]),  # packed over the shared prefix
    ChoiceRequest(PREFIX + " Italy ", ["Rome", "Roma"]),
    ChoiceRequest("Q: capital of Peru? A:", [" Lima", " Cusco"]),  # its own prefix
    ChoiceRequest("we saw Par", ["is", " x"]),  # "is" merges across the boundary: exact fallback forward
]


def _scores(model, tok) -> tuple[list[float], Scorer]:
    scorer = Scorer(model, tok, token_budget=16, head_chunk=5)
    got = scorer.score_choices(REQUESTS, shared_prefix=PREFIX)
    return [float(v) for arr in got for v in arr], scorer


def _naive(model, tok) -> list[float]:
    return [naive_logprob(model, tok, r.context, o) for r in REQUESTS for o in r.options]


def _max_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def adapters_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("adapters")


def _adapter(tiny_model_path, adapters_dir: Path, kind: str) -> Path:
    out = adapters_dir / f"lora-{kind}"
    return out if out.is_dir() else make_tiny_lora_adapter(tiny_model_path(kind), out)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_scorer_runs_lora_layers_of_peft_and_merged_models(tiny_model_path, adapters_dir, kind) -> None:
    base_dir = tiny_model_path(kind)
    tok = AutoTokenizer.from_pretrained(base_dir)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    base_scores, _ = _scores(base, tok)

    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32), _adapter(tiny_model_path, adapters_dir, kind)
    ).eval()
    peft_scores, scorer = _scores(peft_model, tok)
    assert scorer.stats.fallbacks >= 1  # the exact fallback forward ran through the adapter too
    assert _max_diff(peft_scores, _naive(peft_model, tok)) <= TOL
    assert _max_diff(peft_scores, base_scores) > 1e-3  # the LoRA layers really ran

    merged = peft_model.merge_and_unload().eval()
    assert not isinstance(merged, PeftModel)
    merged_scores, _ = _scores(merged, tok)
    assert _max_diff(merged_scores, _naive(merged, tok)) <= TOL
    assert _max_diff(merged_scores, peft_scores) <= TOL


def test_decoder_parts_unwraps_peft(tiny_model_path, adapters_dir) -> None:
    base_dir = tiny_model_path("llama")
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base_dir), _adapter(tiny_model_path, adapters_dir, "llama")
    ).eval()
    inner = peft_model.get_base_model()
    assert type(peft_model.base_model).__name__ == "LoraModel"  # what `model.base_model` used to give
    for wrapped in (peft_model, peft_model.base_model, inner):
        assert unwrap_peft(wrapped) is inner
        parts = decoder_parts(wrapped)
        assert parts.body is inner.model and type(parts.body).__name__ == "LlamaModel"
        assert parts.head is inner.lm_head and parts.text_config is inner.config.get_text_config()
    ids = torch.tensor([[1, 5, 9, 13, 17]])
    with torch.no_grad():
        parts = decoder_parts(peft_model)
        logits = parts.head(parts.body(input_ids=ids).last_hidden_state)
        assert torch.allclose(logits, peft_model(input_ids=ids).logits, atol=1e-5)
    with pytest.raises(ModelError, match="no separate transformer body"):
        decoder_parts(inner.model)  # a headless body


# ------------------------------------------------------------------------------------------
# load_model on adapter folders
# ------------------------------------------------------------------------------------------
def test_load_adapter_with_local_base(tiny_model_path, adapters_dir) -> None:
    base_dir = tiny_model_path("gpt2")
    adapter = _adapter(tiny_model_path, adapters_dir, "gpt2")
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base_dir.resolve())
    lm = load_model(str(adapter), device="cpu", dtype="float32")
    assert isinstance(lm.model, PeftModel) and not lm.model.training
    assert lm.kind == "causal" and lm.is_random and lm.source == "local"
    assert lm.path == adapter.resolve() == lm.adapter_path
    assert lm.base_path == base_dir.resolve() and lm.base_name == str(base_dir.resolve())
    base_rev = load_model(str(base_dir)).revision
    assert lm.revision.startswith("adapter-sha256:") and lm.revision.endswith("+" + base_rev)
    assert len(lm.revision.split("+")[0].removeprefix("adapter-sha256:")) == 64
    assert lm.max_length == 256 == lm.tokenizer.model_max_length
    got, _ = _scores(lm.model, lm.tokenizer)
    assert _max_diff(got, _naive(lm.model, lm.tokenizer)) <= TOL


def test_load_adapter_with_alias_base(tiny_model_path, adapters_dir, monkeypatch) -> None:
    """The base named in adapter_config.json is an alias (its cache folder is the tiny random llama)."""
    tiny = tiny_model_path("llama")
    alias = "smollm2-135m-instruct"
    monkeypatch.setattr(hub, "prepare_alias", lambda name, force=False: tiny)
    adapter = make_tiny_lora_adapter(tiny, adapters_dir / "lora-on-alias", base_name=alias)
    lm = load_model(str(adapter), dtype="float32")
    assert isinstance(lm.model, PeftModel) and lm.base_name == alias and lm.base_path == tiny
    assert lm.revision.endswith(f"+{get_spec(alias).revision}")
    assert lm.has_chat_template  # the base's tokenizer: the adapter folder ships none


def test_base_model_argument_overrides_and_missing_base_is_one_clear_line(
    tiny_model_path, adapters_dir, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    base_dir = tiny_model_path("llama")
    for missing in ("./no/such/base-model", "someorg/no-such-base"):
        adapter = make_tiny_lora_adapter(base_dir, adapters_dir / "lora-lost-base", base_name=missing)
        with pytest.raises(ModelError) as exc:
            load_model(str(adapter))
        msg = str(exc.value)
        assert "\n" not in msg
        assert str(adapter) in msg and repr(missing) in msg and "--base-model" in msg
        assert "base_model_name_or_path" in msg
        lm = load_model(str(adapter), base_model=str(base_dir), dtype="float32")  # the override wins
        assert isinstance(lm.model, PeftModel) and lm.base_name == str(base_dir)
        assert lm.base_path == base_dir.resolve()
    with pytest.raises(ModelError) as exc:
        load_model(str(adapter), base_model="./also/missing")
    assert "'./also/missing' (given as base_model)" in str(exc.value) and str(adapter) in str(exc.value)
    with pytest.raises(ConfigError, match="applies only to PEFT adapter folders"):
        load_model(str(base_dir), base_model=str(base_dir))


def test_adapter_dtype_and_own_tokenizer(tiny_model_path, adapters_dir, tmp_path) -> None:
    base_dir = tiny_model_path("gpt2")
    adapter = make_tiny_lora_adapter(base_dir, tmp_path / "lora-with-tokenizer")
    lm = load_model(str(adapter), dtype="bfloat16")
    assert {p.dtype for p in lm.model.parameters()} == {torch.bfloat16}
    assert not lm.has_chat_template
    tok = AutoTokenizer.from_pretrained(base_dir)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(adapter)  # a trainer that saved its tokenizer next to the adapter
    assert load_model(str(adapter)).has_chat_template


@pytest.mark.real_model
def test_lora_on_real_alias_scores_exactly(real_model_path, tmp_path, monkeypatch) -> None:
    """A random LoRA adapter on SmolLM2, its base named by alias: scorer == naive PeftModel forward."""
    alias = "smollm2-135m-instruct"
    folder = real_model_path(alias)
    monkeypatch.setenv("FACTPROBE_CACHE", str(REAL_CACHE_ROOT))
    adapter = make_tiny_lora_adapter(folder, tmp_path / "lora-smollm2", base_name=alias, rank=2)
    lm = load_model(str(adapter), device="cpu", dtype="float32")
    assert isinstance(lm.model, PeftModel) and lm.base_path == folder and lm.base_name == alias
    assert lm.revision.endswith(f"+{get_spec(alias).revision}") and not lm.is_random
    got, _ = _scores(lm.model, lm.tokenizer)
    assert _max_diff(got, _naive(lm.model, lm.tokenizer)) <= TOL
