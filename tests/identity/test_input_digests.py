"""Issue 37 item 6: a probe run's identity (run_config.json, metrics.json, MLflow) gives each input
the digest of its own content, so `data` and `train_data` never share one when they differ."""

from types import SimpleNamespace

from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_identity
from factprobe.identity import RunIdentity, path_digest, with_inputs


def _folders(tmp_path):
    data, train = tmp_path / "lama", tmp_path / "train"
    for folder, text in ((data, "test facts\n"), (train, "train facts\n")):
        folder.mkdir()
        (folder / "P36.jsonl").write_text(text)
    return data, train


def test_each_input_carries_its_own_contents_digest(tmp_path):
    data, train = _folders(tmp_path)
    ident = with_inputs(RunIdentity("m", "sha256:prepared", "k"), {"data": str(data), "train_data": str(train)})
    got = {i["name"]: i["digest"] for i in ident.inputs}
    assert got == {"data": path_digest(data), "train_data": path_digest(train)}
    assert got["data"] != got["train_data"]


def test_run_config_identity_gives_data_and_train_data_different_digests(tmp_path):
    data, train = _folders(tmp_path)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")  # hashed for the revision, never loaded
    cfg = RunConfig.from_dict({"probe": "ic-lke", "model": str(model), "data": str(data), "train_data": str(train)})
    prepared = SimpleNamespace(kind="mc", items={}, facts={})
    inputs = {i["name"]: i for i in run_identity(cfg, prepared).to_dict()["inputs"]}
    assert inputs["data"]["digest"] != inputs["train_data"]["digest"]
    assert inputs["train_data"]["digest"] == path_digest(train)
    # the same bytes elsewhere give the same digest: a digest is of content, not of a location
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "P36.jsonl").write_text("train facts\n")
    assert path_digest(tmp_path / "copy") == inputs["train_data"]["digest"]
