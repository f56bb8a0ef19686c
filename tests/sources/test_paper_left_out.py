"""Issue 37 item 6: the "paper templates" set says which of wu2024's Table 5 templates it leaves out
and why: Native language HGP 1 and Official language MMP 2-3, which state the relation backwards
(`lpaqa.is_backwards`). The list reaches metrics.json through the run's prepared info."""

from types import SimpleNamespace

from factprobe.framework.config import RunConfig
from factprobe.framework.registry import get_probe
from factprobe.sources.lpaqa import paper_relations, paper_templates


def test_left_out_are_the_backwards_rows_of_table5():
    from factprobe.sources.lpaqa import paper_left_out

    every = [e for k in ("hgp", "mmp") for r in paper_relations() for e in paper_left_out(k, r)]
    assert [(e["relation"], e["kind"], e["index"], e["template"]) for e in every] == [
        ("P103", "hgp", 1, "[X] is a native language of [Y]"),
        ("P37", "mmp", 2, "[X] is the official language in [Y]"),
        ("P37", "mmp", 3, "[X] is the official language spoken in [Y]"),
    ]
    for e in every:
        assert e["why"].startswith("backwards") and e["relation_name"] in ("Native language", "Official language")
        kept = paper_templates(e["kind"], e["relation"])
        assert e["template"] not in kept and e["template"] in paper_templates(e["kind"], e["relation"], keep_backwards=True)
    assert paper_left_out("hgp", "P36") == []


def test_a_paper_run_records_what_it_left_out():
    for name, rel, n in (("hgp", "P103", 1), ("mmp", "P37", 2)):
        cfg = RunConfig.from_dict({"probe": name, "model": "m", "templates": "paper"})
        prepared = SimpleNamespace(items={rel: [], "P36": []}, info={})
        get_probe(name).validate(cfg, prepared)
        left = prepared.info[f"{name}_paper_left_out"]
        assert [e["relation"] for e in left] == [rel] * n and all(e["why"] for e in left)
        sampled = SimpleNamespace(items={rel: [], "P36": []}, info={})
        get_probe(name).validate(RunConfig.from_dict({"probe": name, "model": "m", "templates": "1"}), sampled)
        assert f"{name}_paper_left_out" not in sampled.info  # a sampled set is not the paper's
    import dataclasses

    help_text = next(f for f in dataclasses.fields(get_probe("hgp").config_class) if f.name == "templates").metadata["help"]
    assert "less its backwards" in help_text  # no longer "exactly" Table 5
