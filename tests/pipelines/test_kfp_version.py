"""The Kubeflow Pipelines backend version: the fields a compiled pipeline needs, `--compat`, and the
check at submit/schedule time against the version the fake API server reports on healthz."""

from __future__ import annotations

import pytest

from factprobe.errors import ConfigError
from factprobe_ops.pipelines.kfp_compat import (
    compat_platform_spec,
    load_compiled,
    minimum_backend,
    parse_version,
    required_features,
)

# ruff: noqa: F811 - the shared fixture is imported by name and requested as a test parameter
from tests.pipelines.pipeline_fixtures import kfp_api  # noqa: F401 (fixture)

pytestmark = pytest.mark.filterwarnings("ignore:This client only works with Kubeflow Pipeline:FutureWarning")
RUNS = "/apis/v2beta1/runs"
RECURRING = "/apis/v2beta1/recurringruns"


@pytest.fixture(autouse=True)
def built_images(monkeypatch):
    monkeypatch.setenv("FACTPROBE_IMAGE_CPU", "registry.example.com/factprobe-cpu:0.1.0-abc1234")
    monkeypatch.setenv("FACTPROBE_IMAGE_GPU", "registry.example.com/factprobe-gpu:0.1.0-abc1234")


@pytest.fixture(scope="module")
def compiled_pair(tmp_path_factory):
    """The regression pipeline compiled as is and with --compat (CLI), loaded back."""
    import os

    from factprobe.cli import main

    out = tmp_path_factory.mktemp("compiled")
    env = {"FACTPROBE_IMAGE_CPU": "r/cpu:1", "FACTPROBE_IMAGE_GPU": "r/gpu:1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        assert main(["pipeline", "compile", "regression", "--out", str(out / "new")]) == 0
        assert main(["pipeline", "compile", "regression", "--compat", "--out", str(out / "old")]) == 0
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return load_compiled(str(out / "new" / "regression.yaml")), load_compiled(str(out / "old" / "regression.yaml"))


def _k8s(platform: dict) -> dict:
    return platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def test_parse_version():
    assert parse_version("2.5.0") == (2, 5, 0)
    assert parse_version("v2.14.3-rc.1") == (2, 14, 3)
    assert parse_version("2.1") == (2, 1, 0)
    assert parse_version("unknown") is None and parse_version("") is None


@pytest.mark.slow
def test_the_compiled_pipeline_needs_2_17_and_compat_needs_2_1(compiled_pair):
    (spec, platform, _), (cspec, cplatform, _) = compiled_pair
    names = {f.name for f in required_features(spec, platform)}
    assert {
        "secretAsEnv.secretNameParameter",
        "secretAsEnv.optional",
        "securityContext",
        "tolerations",
        "nodeSelector",
        "podMetadata (pod labels)",
        "retryPolicy",
    } <= names
    assert minimum_backend(spec, platform) == (2, 17, 0)
    assert minimum_backend(cspec, cplatform) == (2, 1, 0)


def test_compat_drops_only_the_fields_with_an_older_equivalent(compiled_pair):
    (spec, platform, _), (cspec, cplatform, docs) = compiled_pair
    new, old = _k8s(platform), _k8s(cplatform)
    assert set(new) == set(old)
    for name, executor in new.items():
        assert "securityContext" in executor and "securityContext" not in old[name]
        required = [x for x in executor["secretAsEnv"] if x.get("optional") is not True]
        for a, b in zip(required, old[name]["secretAsEnv"], strict=True):
            assert a["secretName"] == b["secretName"] and a["keyToEnv"] == b["keyToEnv"]
            assert "secretNameParameter" in a and "secretNameParameter" not in b
            assert "optional" not in b
        rest = {k: v for k, v in executor.items() if k not in ("securityContext", "secretAsEnv")}
        assert rest == {k: v for k, v in old[name].items() if k != "secretAsEnv"}  # selectors, tolerations, labels
    assert cspec == spec  # the pipeline spec is untouched
    assert len(docs) == 2
    assert compat_platform_spec(platform) == cplatform


@pytest.mark.slow
def test_compat_file_loads_like_the_kfp_client(compiled_pair, tmp_path):
    """kfp.Client reads a package with its own loader: the rewritten file must still be one."""
    from kfp.client.client import _extract_pipeline_yaml

    from factprobe.cli import main

    assert main(["pipeline", "compile", "regression", "--compat", "--out", str(tmp_path)]) == 0
    from google.protobuf.json_format import MessageToDict

    loaded = _extract_pipeline_yaml(str(tmp_path / "regression.yaml"))
    assert loaded.pipeline_spec.pipeline_info.name == "factprobe-regression"
    platform = MessageToDict(loaded.platform_spec)
    assert _k8s(platform) and all("securityContext" not in e for e in _k8s(platform).values())


@pytest.mark.slow
def test_submit_to_a_current_backend_sends_the_full_spec(kfp_api):
    from factprobe_ops.pipelines import remote

    remote.submit("regression", kfp_api.host, {"candidate": "gemma-3-270m"})
    platform = kfp_api.only("POST", RUNS).body["pipeline_spec"]["platform_spec"]
    assert all("securityContext" in e for e in _k8s(platform).values())


@pytest.mark.slow
@pytest.mark.parametrize("tag", ["2.5.0", "2.14.3"])
def test_submit_to_an_older_backend_is_refused_with_the_fields_and_compat(kfp_api, tag):
    from factprobe_ops.pipelines import remote

    kfp_api.tag_name = tag
    with pytest.raises(ConfigError) as e:
        remote.submit("regression", kfp_api.host, {"candidate": "gemma-3-270m"})
    msg = str(e.value)
    assert f"Kubeflow Pipelines {tag} at {kfp_api.host} is too old" in msg
    assert "securityContext needs 2.17.0" in msg and "secretAsEnv.optional needs 2.15.0" in msg
    assert "pass --compat" in msg
    assert not kfp_api.calls("POST", RUNS)  # nothing submitted


@pytest.mark.slow
def test_submit_with_compat_to_an_older_backend_sends_the_compat_spec(kfp_api, capsys):
    from factprobe.cli import main

    kfp_api.tag_name = "2.2.0"
    assert main(["pipeline", "submit", "regression", "--host", kfp_api.host, "--compat"]) == 0
    platform = kfp_api.only("POST", RUNS).body["pipeline_spec"]["platform_spec"]
    for executor in _k8s(platform).values():
        assert "securityContext" not in executor
        assert all("secretNameParameter" not in s and "optional" not in s for s in executor["secretAsEnv"])
    # 2.2.0 runs the compat spec but ignores retries and string resources: said, not refused
    assert "warning: Kubeflow Pipelines 2.2.0" in capsys.readouterr().err


@pytest.mark.slow
def test_a_backend_older_than_compat_needs_is_refused_even_with_compat(kfp_api):
    from factprobe_ops.pipelines import remote

    kfp_api.tag_name = "2.0.5"
    with pytest.raises(ConfigError, match=r"2\.0\.5 .* too old for this pipeline: .*tolerations needs 2\.1\.0.*upgrade"):
        remote.submit("regression", kfp_api.host, {"candidate": "gemma-3-270m"}, compat=True)


@pytest.mark.slow
def test_unknown_backend_version_warns_and_submits(kfp_api, capsys):
    from factprobe_ops.pipelines import remote

    kfp_api.tag_name = "unknown"
    remote.submit("regression", kfp_api.host, {"candidate": "gemma-3-270m"})
    assert kfp_api.only("POST", RUNS)
    assert "does not report its Kubeflow Pipelines version" in capsys.readouterr().err


@pytest.mark.slow
def test_schedule_checks_the_version_too(kfp_api):
    from factprobe_ops.pipelines import remote

    kfp_api.tag_name = "2.4.1"
    with pytest.raises(ConfigError, match="too old"):
        remote.schedule("probe", kfp_api.host, "0 0 2 * * *", {})
    assert not kfp_api.calls("POST", RECURRING)
    remote.schedule("probe", kfp_api.host, "0 0 2 * * *", {}, compat=True)
    body = kfp_api.only("POST", RECURRING).body
    assert all("securityContext" not in e for e in _k8s(body["pipeline_spec"]["platform_spec"]).values())


def test_compat_leaves_out_optional_secrets_and_says_so():
    from factprobe_ops.pipelines.kfp_compat import compat_notes

    platform = {
        "platforms": {
            "kubernetes": {
                "deploymentSpec": {
                    "executors": {
                        "exec-probe-model": {
                            "secretAsEnv": [
                                {
                                    "secretName": "mlflow-credentials",
                                    "optional": False,
                                    "keyToEnv": [{"envVar": "A", "secretKey": "A"}],
                                    "secretNameParameter": {"runtimeValue": {"constant": "mlflow-credentials"}},
                                },
                                {
                                    "secretName": "hf-token",
                                    "optional": True,
                                    "keyToEnv": [{"envVar": "HF_TOKEN", "secretKey": "HF_TOKEN"}],
                                },
                            ]
                        }
                    }
                }
            }
        }
    }
    out = _k8s(compat_platform_spec(platform))["exec-probe-model"]["secretAsEnv"]
    assert out == [{"secretName": "mlflow-credentials", "keyToEnv": [{"envVar": "A", "secretKey": "A"}]}]
    assert compat_notes(platform) == [
        (
            "--compat leaves out the optional secret hf-token (HF_TOKEN): older backends "
            "cannot mark a secret optional (a gated hub model then fails to download)"
        )
    ]
