"""Issue 28 item 7: `--model-meta` bases that form a cycle (A's base is B, B's base is A) were accepted,
and every base-vs-fine-tuned comparison then paired each model with the other. Refused in one line
naming the cycle, whether the bases come from the metadata file or from the models' own folders."""

from __future__ import annotations

import json

import pytest

from factprobe.errors import ConfigError
from factprobe.report.model_meta import base_pairs, resolve_model_meta


def test_two_model_cycle_in_a_csv(tmp_path):
    meta = tmp_path / "meta.csv"
    meta.write_text("model,family,size,base\norg/a,llama,1B,org/b\norg/b,llama,7B,org/a\n")
    with pytest.raises(ConfigError) as e:
        resolve_model_meta(["org/a", "org/b"], meta)
    assert str(e.value).startswith("model bases form a cycle: org/a -> org/b -> org/a ")


def test_three_model_cycle_in_yaml_names_every_model(tmp_path):
    meta = tmp_path / "meta.yaml"
    meta.write_text("org/a: {base: org/b}\norg/b: {base: org/c}\norg/c: {base: org/a}\norg/d: {base: org/a}\n")
    with pytest.raises(ConfigError, match=r"^model bases form a cycle: org/a -> org/b -> org/c -> org/a "):
        resolve_model_meta(["org/a", "org/b", "org/c", "org/d"], meta)


def test_cycle_through_adapter_folders(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for me, other in ((a, b), (b, a)):
        me.mkdir()
        (me / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(other)}))
    with pytest.raises(ConfigError, match="model bases form a cycle: a -> b -> a"):
        resolve_model_meta([str(a), str(b)])


def test_a_chain_is_no_cycle(tmp_path):
    meta = tmp_path / "meta.csv"
    meta.write_text("model,family,size,base\norg/a,llama,1B,\norg/b,llama,1B,org/a\norg/c,llama,1B,org/b\n")
    metas = resolve_model_meta(["org/a", "org/b", "org/c"], meta)
    assert base_pairs(metas) == {"org/b": "org/a", "org/c": "org/b"}
