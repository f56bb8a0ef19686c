"""The Kubeflow form of the pipelines (issue 38 item 3): whole numbers are NUMBER_INTEGER (optional, without a
default, where the field is optional), lists are LIST, and every default is the one its description states.

Compiled here for four pipelines (between them every parameter the issue names: max_facts_per_relation,
max_templates, max_candidates, qa_train_per_relation, grad_accum, train_size, findings' choices, relations,
template_sources). A list, or a number that may be left empty, cannot sit in the config dict constant, so it
reaches the `pack-config` step as an input of its own and every step takes that step's dict; local builds
(kfp's local runner takes neither an empty optional parameter nor a list in a dict) keep them as text and
take the cluster build's typed values.
"""

from __future__ import annotations

import os

import pytest

from tests.pipelines.pipeline_fixtures import load_compiled

COMPILED = ("belief", "coherency", "finetune_known_unknown", "findings")
NONE = object()  # no defaultValue
#: {pipeline: {parameter: (type, default)}}
EXPECTED = {
    "belief": {
        "max_facts_per_relation": ("NUMBER_INTEGER", 20.0),
        "max_templates": ("NUMBER_INTEGER", NONE),
        "relations": ("LIST", []),
        "template_sources": ("LIST", ["lama", "pararel", "lpaqa-manual", "lpaqa-paraphrase", "belief-qa"]),
    },
    "coherency": {"max_candidates": ("NUMBER_INTEGER", NONE), "relations": ("LIST", [])},
    "finetune_known_unknown": {
        "qa_train_per_relation": ("NUMBER_INTEGER", 50.0),
        "grad_accum": ("NUMBER_INTEGER", NONE),
        "train_size": ("NUMBER_INTEGER", NONE),
        "relations": ("LIST", []),
    },
    "findings": {
        "choices": ("NUMBER_INTEGER", NONE),
        "max_candidates": ("NUMBER_INTEGER", NONE),
        "max_facts_per_relation": ("NUMBER_INTEGER", 8.0),
        "relations": ("LIST", ["P36", "P1376", "P37"]),
    },
}


def _compile(name, path, local=False):
    from kfp import compiler

    from factprobe_ops.pipelines.catalogue import get_pipeline

    compiler.Compiler().compile(get_pipeline(name, local=local), str(path))
    return load_compiled(path)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        for key in [k for k in os.environ if k.startswith("FACTPROBE_")]:
            mp.delenv(key)
        root = tmp_path_factory.mktemp("typed")
        return {name: _compile(name, root / f"{name}.yaml") for name in COMPILED}
    finally:
        mp.undo()


def _params(c) -> dict:
    return c.spec["root"]["inputDefinitions"]["parameters"]


@pytest.mark.slow  # compiles four pipelines
@pytest.mark.parametrize("name", COMPILED)
def test_numbers_and_lists_have_their_kubeflow_types(compiled, name):
    params = _params(compiled[name])
    for pname, (kind, default) in EXPECTED[name].items():
        spec = params[pname]
        assert spec["parameterType"] == kind, f"{name}.{pname} is {spec['parameterType']}, not {kind}"
        assert spec.get("isOptional") is True, pname
        if default is NONE:
            assert "defaultValue" not in spec, f"{name}.{pname}: an empty optional number has no default, got {spec}"
        else:
            assert spec["defaultValue"] == default, f"{name}.{pname}"
    # no whole number or list of a config is left as text
    from factprobe_ops.pipelines.catalogue import get_pipeline, pipeline_parameters

    for pname, (typ, _) in pipeline_parameters(get_pipeline(name)).items():
        if params[pname]["parameterType"] == "STRING":
            assert typ is str, f"{name}.{pname} is text but typed {typ}"


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPILED)
def test_every_default_is_the_one_its_description_states(compiled, name):
    for pname, spec in _params(compiled[name]).items():
        text = spec.get("description", "")
        has_default = spec.get("defaultValue") not in (None, "", [])
        if has_default and spec["parameterType"] in ("NUMBER_INTEGER", "LIST"):
            assert "(default: all" not in text and "empty: all" not in text, f"{name}.{pname}: {text}"
            assert "(empty: not set)" not in text, f"{name}.{pname}: a number or list with a default cannot be left empty"
        if "(empty: not set)" in text or "empty: not set)" in text:
            assert spec.get("defaultValue") in (None, "", []), f"{name}.{pname} says empty but defaults to {spec['defaultValue']}"
    if "max_facts_per_relation" in _params(compiled[name]) and name != "findings":
        spec = _params(compiled[name])["max_facts_per_relation"]
        assert spec["defaultValue"] == 20.0 and "20 by default" in spec["description"]


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPILED)
def test_lists_and_empty_numbers_reach_the_steps_through_pack_config(compiled, name):
    c = compiled[name]
    tasks = c.tasks()
    packs = {t: spec for t, (_, spec) in tasks.items() if t.startswith("pack-config")}
    assert packs, f"{name} has no pack-config step"
    routed = [p for p, (kind, default) in EXPECTED[name].items() if kind == "LIST" or default is NONE]
    for pname in routed:
        assert any(spec["inputs"]["parameters"].get(pname) == {"componentInputParameter": pname} for spec in packs.values()), (
            f"{name}: {pname} does not reach pack-config as an input of its own"
        )
    for tname, (_, spec) in tasks.items():
        config = spec.get("inputs", {}).get("parameters", {}).get("config")
        if config is None or tname.startswith("pack-config"):
            continue
        producer = config.get("taskOutputParameter", {}).get("producerTask", "")  # a step of the root DAG
        inner = config.get("componentInputParameter", "")  # a step inside a sub-DAG (the ExitHandler, a loop)
        assert producer.startswith("pack-config") or inner.startswith("pipelinechannel--pack-config"), (
            f"{name}: step {tname} takes its config from {config}, not pack-config"
        )


def test_pack_fills_the_dict_the_steps_read():
    from factprobe_ops.components.steps.pack_config import pack

    config = {"seed": "0", "max_facts_per_relation": "20"}
    given = {"relations": [], "template_sources": ["lama", " pararel"], "max_templates": None, "train_size": 7}
    out = pack(config, ["relations", "template_sources", "max_templates", "train_size"], given)
    assert out == {
        "seed": "0",
        "max_facts_per_relation": "20",
        "relations": None,  # empty: every usable relation
        "template_sources": "lama,pararel",  # the config field holds comma-separated text
        "max_templates": None,
        "train_size": 7,
    }
    assert pack(config, ["relations"], {"relations": ["P36", "P19"]})["relations"] == ["P36", "P19"]
    with pytest.raises(ValueError, match="no input for 'shots'"):
        pack(config, ["shots"], given)


def test_typed_values_are_checked_and_reach_a_local_build_as_text(monkeypatch):
    """`--param` values are typed from the cluster build (`relations=P36,P19` a list, `max_templates=5` an int,
    empty: None), checked like the steps check them, and a local build takes them as its text parameters."""
    from kfp.dsl.graph_component import GraphComponent

    from factprobe.errors import ConfigError
    from factprobe_ops.pipelines.catalogue import get_pipeline, parse_params

    params = parse_params(
        get_pipeline("belief"),
        ["relations=P36,P19", "max_templates=5", "template_sources=lama,pararel", "max_facts_per_relation=3"],
        "belief",
    )
    assert params == {
        "relations": ["P36", "P19"],
        "max_templates": 5,
        "template_sources": ["lama", "pararel"],
        "max_facts_per_relation": 3,
    }
    assert parse_params(get_pipeline("belief"), ["max_templates="], "belief") == {"max_templates": None}
    with pytest.raises(ConfigError, match="template_sources"):
        parse_params(get_pipeline("belief"), ["template_sources=lama,nowhere"], "belief")
    with pytest.raises(ConfigError, match="max_templates"):
        parse_params(get_pipeline("belief"), ["max_templates=0"], "belief")

    local = get_pipeline("belief", local=True)
    assert isinstance(local, GraphComponent)  # kfp still compiles and runs it
    seen = {}
    monkeypatch.setattr(GraphComponent, "__call__", lambda self, *a, **kw: seen.update(kw))
    local(**params, data="/data/lama")
    assert seen == {
        "relations": "P36,P19",
        "max_templates": "5",
        "template_sources": "lama,pararel",
        "max_facts_per_relation": 3,  # a number with a default is a number in both builds
        "data": "/data/lama",
    }
