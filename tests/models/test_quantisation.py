"""Issue 37 item 6: the model names say what they are. `smollm2-135m-instruct` and `gemma-3-270m` are
4-bit GGUF quantisations (Q4_1, Q4_K_M) dequantised to float32, and every run of them records it in
its identity: run_config.json, metrics.json, the MLflow param `identity.weights` and the screen."""

import json
from types import SimpleNamespace

import pytest

import factprobe.framework.runner as runner
import factprobe.models.loading as loading
from factprobe.framework.config import RunConfig
from factprobe.identity import RunIdentity
from factprobe.models.aliases import get_spec
from factprobe.models.gguf_cache import MARKER_NAME
from factprobe.paths import cache_root

REAL_GGUF = {alias: cache_root() / "gguf" / get_spec(alias).gguf_name for alias in ("smollm2-135m-instruct", "gemma-3-270m")}


@pytest.mark.parametrize("alias, quant", [("smollm2-135m-instruct", "Q4_1"), ("gemma-3-270m", "Q4_K_M")])
def test_the_registry_says_what_each_gguf_header_says(alias, quant):
    from factprobe.models.quantisation import gguf_file_type

    assert get_spec(alias).quantisation == quant
    assert quant in get_spec(alias).description and "dequantised to float32" in get_spec(alias).description
    if not REAL_GGUF[alias].is_file():
        pytest.skip(f"{REAL_GGUF[alias]} not downloaded here")
    assert gguf_file_type(REAL_GGUF[alias]) == quant  # the file's own header, not the name


def test_weights_of_an_alias_revision_from_the_manifest_else_the_registry(tmp_cache):
    from factprobe.models.quantisation import weights_of

    spec = get_spec("gemma-3-270m")
    w = weights_of(spec.revision)  # no converted folder here: the registry
    assert w["description"] == "GGUF Q4_K_M, dequantised to float32" and w["recorded_by"] == "model registry"
    spec.cache_dir.mkdir(parents=True)
    marker = {"revision": spec.revision, "dtype": "float32", "quantisation": "Q4_K_M"}
    (spec.cache_dir / MARKER_NAME).write_text(json.dumps(marker))
    w = weights_of(spec.revision)
    assert (w["quantisation"], w["dtype"], w["recorded_by"]) == ("Q4_K_M", "float32", "conversion manifest")
    assert weights_of("local-sha256:" + "0" * 64) == {} and weights_of("") == {}


def test_a_runs_identity_records_and_shows_the_quantisation(monkeypatch, tmp_cache, tmp_path):
    spec = get_spec("smollm2-135m-instruct")
    monkeypatch.setattr(loading, "model_revision", lambda *a, **k: spec.revision)  # no weights are converted
    monkeypatch.setattr(runner, "resolved_numerics", lambda *a: {"dtype": "float32", "device": "cpu"})  # no torch
    cfg = RunConfig.from_dict({"probe": "ic-lke", "model": spec.alias})
    ident = runner.run_identity(cfg, SimpleNamespace(kind="mc", items={}, facts={}))
    assert ident.weights["description"] == "GGUF Q4_1, dequantised to float32"
    again = RunIdentity.from_dict(json.loads(json.dumps(ident.to_dict())))  # run_config.json / metrics.json
    assert again.weights == ident.weights and again.key() == ident.key()
    assert again.params()["identity.weights"] == "GGUF Q4_1, dequantised to float32"  # MLflow
    assert "(GGUF Q4_1, dequantised to float32)" in again.line()  # the screen
    assert "identity.weights" not in RunIdentity("local-sha256:1", "d", "k").params()
