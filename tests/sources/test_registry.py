"""`load_facts`: source names, defaults and errors."""

from __future__ import annotations

import pytest

from factprobe.errors import ConfigError, DataError
from factprobe.sources import SOURCES, default_path, load_facts


def test_unknown_source_lists_known():
    with pytest.raises(
        ConfigError, match="unknown fact source 'wikidata'; known: countryinfo, lama, lpaqa-train, nobel, triples, s3"
    ):
        load_facts("wikidata")


def test_default_is_countryinfo_and_path_ignored():
    fs = load_facts(path="/does/not/matter", relations=["P36"])
    assert fs.source.startswith("countryinfo:") and set(fs.relations) == {"P36"}


def test_sources_needing_a_path():
    for source in ("triples", "s3"):
        with pytest.raises(ConfigError, match=f"source '{source}' needs a path"):
            load_facts(source)
    with pytest.raises(ConfigError, match="use source 's3'"):
        load_facts("lama", "s3://bucket/lama")


def test_default_paths_follow_factprobe_data(monkeypatch, tmp_path):
    monkeypatch.setenv("FACTPROBE_DATA", str(tmp_path))
    assert default_path("lama") == tmp_path / "lama"
    assert default_path("triples") is None
    with pytest.raises(DataError, match="default data for source 'nobel' not found"):
        load_facts("nobel")
    assert set(SOURCES) >= {"countryinfo", "lama", "lpaqa-train", "nobel", "triples", "s3"}
