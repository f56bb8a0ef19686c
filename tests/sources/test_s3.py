"""S3 source against a real moto S3 server on loopback (fixture `moto_s3_endpoint`)."""

from __future__ import annotations

import uuid
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from factprobe.errors import ConfigError, DataError
from factprobe.sources import load_facts
from factprobe.sources.lama import load_lama
from factprobe.sources.s3 import load_s3, make_client, parse_s3_uri

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def lama_dir(real_data_root: Path) -> Path:
    path = real_data_root / "lama"
    if not (path / "trex" / "P36.jsonl").is_file():
        pytest.skip(f"LAMA data not found at {path}")
    return path


@pytest.fixture
def bucket(s3_env, lama_dir) -> str:
    """A fresh bucket holding a LAMA layout under `lama/`, a decoy `lama2/`, and triples files."""
    name = f"facts-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=s3_env)
    s3.create_bucket(Bucket=name)
    s3.upload_file(str(lama_dir / "relations.jsonl"), name, "lama/relations.jsonl")
    for rel in ("P36", "P1376"):
        s3.upload_file(str(lama_dir / "trex" / f"{rel}.jsonl"), name, f"lama/trex/{rel}.jsonl")
    s3.put_object(Bucket=name, Key="lama2/P9.jsonl", Body=b'{"sub_label": "x", "obj_label": "y"}\n')
    s3.put_object(Bucket=name, Key="triples/a.csv", Body=b"subject,relation,object\nFrance,capital,Paris\n")
    s3.put_object(
        Bucket=name, Key="triples/sub/b.jsonl", Body=b'{"subject": "Spain", "relation": "capital", "object": "Madrid"}\n'
    )
    s3.put_object(Bucket=name, Key="triples/README.md", Body=b"not data")
    s3.put_object(Bucket=name, Key="broken/t.csv", Body=b"subject,relation,object\nFrance,capital,\n")
    s3.put_object(Bucket=name, Key="docs/readme.txt", Body=b"hello")
    return name


def test_parse_uri():
    assert parse_s3_uri("s3://b/x/y/") == ("b", "x/y")
    assert parse_s3_uri("s3://b") == ("b", "")
    with pytest.raises(ConfigError, match="not an s3 URI"):
        parse_s3_uri("/local/path")


def test_lama_layout_matches_local_reader(bucket, lama_dir):
    fs = load_facts("s3", f"s3://{bucket}/lama")
    local = load_lama(lama_dir, relations=["P36", "P1376"])
    assert fs.digest() == local.digest()
    assert set(fs.relations) == {"P36", "P1376"}
    assert fs.relations["P36"].template == "The capital of [X] is [Y] ."  # relations.jsonl was used
    assert fs.source == f"s3://{bucket}/lama"
    only = load_s3(f"s3://{bucket}/lama/", relations=["P1376"])
    assert set(only.relations) == {"P1376"}
    with pytest.raises(ConfigError, match=f"unknown relation.*P19 in s3://{bucket}/lama; known: P36, P1376"):
        load_s3(f"s3://{bucket}/lama", relations=["P19"])


def test_triples_folder_and_single_object(bucket):
    fs = load_s3(f"s3://{bucket}/triples")
    assert sorted(f.subject for f in fs) == ["France", "Spain"]
    one = load_s3(f"s3://{bucket}/triples/a.csv")
    assert [f.object for f in one] == ["Paris"]


def test_errors_name_the_uri(bucket):
    with pytest.raises(DataError, match=rf"^s3://{bucket}/lam: no objects under this prefix$"):
        load_s3(f"s3://{bucket}/lam")  # a prefix is a folder: never matches lama/ or lama2/
    with pytest.raises(DataError, match=r"^s3://no-such-bucket-[0-9a-f]+/x: bucket does not exist$"):
        load_s3(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/x")
    with pytest.raises(DataError, match=rf"^s3://{bucket}/broken/t\.csv:2: empty value for field 'object'$"):
        load_s3(f"s3://{bucket}/broken")
    with pytest.raises(DataError, match=rf"s3://{bucket}/docs: no P\*\.jsonl or triples files"):
        load_s3(f"s3://{bucket}/docs")


def test_mlflow_endpoint_variable_is_honoured(bucket, s3_env, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", s3_env)
    assert len(load_s3(f"s3://{bucket}/triples")) == 2


def test_unreachable_endpoint(s3_env, monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(DataError, match=r"^s3://b/x: cannot reach the S3 endpoint"):
        load_s3("s3://b/x")


def test_access_denied_is_one_line(s3_env):
    client = make_client()
    with Stubber(client) as stub:
        stub.add_client_error("list_objects_v2", service_error_code="AccessDenied", http_status_code=403)
        with pytest.raises(DataError, match=r"^s3://b/x: access denied \(AccessDenied\)$"):
            load_s3("s3://b/x", client=client)


def test_credentials_in_the_uri_are_used_and_never_shown(bucket, monkeypatch):
    """issue 18 item 17: `s3://KEY:SECRET@bucket/prefix` uses KEY/SECRET for the client (it used to
    read `KEY:SECRET@bucket` as the bucket name); the FactSet's source and every message show the
    URI without them."""
    import factprobe.sources.s3 as s3mod

    seen: list = []
    real = s3mod.make_client

    def spy(endpoint_url=None, credentials=None):
        seen.append(credentials)
        return real(endpoint_url, credentials)

    monkeypatch.setattr(s3mod, "make_client", spy)
    facts = load_s3(f"s3://AKIA%2FX:se%40cret@{bucket}/lama", relations=["P36"])
    assert seen == [("AKIA/X", "se@cret")]
    assert facts.source == f"s3://{bucket}/lama" and len(facts.facts) > 0
    with pytest.raises(DataError) as e:
        load_s3(f"s3://AKIA:TOPSECRET@{bucket}/nothing-here")
    assert "TOPSECRET" not in str(e.value) and "AKIA" not in str(e.value)
    with pytest.raises(ConfigError, match=r"KEY:SECRET") as e:
        load_s3(f"s3://ONLYKEY@{bucket}/lama")
    assert "ONLYKEY" not in str(e.value)
