"""Issue 39 item 4: the Python API returns the map as DataFrames (`factprobe.knowledge_map(...)`)."""

from __future__ import annotations

import pandas as pd

import factprobe

from .runs import write_runs


def test_the_python_api_returns_the_map_as_dataframes(tmp_path):
    km = factprobe.knowledge_map(write_runs(tmp_path / "runs"), out=tmp_path / "map")
    assert isinstance(km.shares, pd.DataFrame) and set(km.shares["category"]) == {"every", "majority", "none", "disputed"}
    assert isinstance(km.pairs, pd.DataFrame) and len(km.pairs) == 3
    assert list(km.disputed.columns[:3]) == ["model", "fact_id", "relation"]
    assert km.folder == tmp_path / "map" and km.summary["n_facts"] == 6
    again = factprobe.knowledge_map(write_runs(tmp_path / "runs"), out=tmp_path / "map")
    assert again.reused
    temp = factprobe.knowledge_map(str(tmp_path / "runs" / "ic-lke-model-a"))  # one run, a temporary folder
    assert temp.summary["n_facts"] == 6 and temp.pairs.empty and temp.folder.is_dir()
