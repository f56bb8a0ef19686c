"""Facts from S3 (or MinIO / moto): `s3://bucket/prefix`.

The prefix names a "folder" (`s3://b/lama` lists `lama/...`, never `lama2/...`) or one object
(`s3://b/facts.csv`). What is found decides the reader:
- any `P*.jsonl` object: a LAMA layout (`relations.jsonl` optional) -> `lama.load_lama`;
- otherwise `.jsonl` / `.csv` / `.parquet` objects -> `triples.load_triples`.
Only the objects the reader needs are downloaded, into a temporary folder that is removed
afterwards. Error messages name the s3 URI, never the temporary folder.

Endpoint: the `endpoint_url` argument, else env `AWS_ENDPOINT_URL`, else
`MLFLOW_S3_ENDPOINT_URL`, else AWS. Credentials: those inside the URI
(`s3://KEY:SECRET@bucket/prefix`, percent-encoded where needed) when given, else the usual boto3
chain (`AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`, profiles, ...). Messages, stored configs and
MLflow parameters show such a URI masked (`s3://***@bucket/prefix`, `factprobe.redact`).

A missing bucket, an empty prefix, denied access, missing credentials or an unreachable
endpoint raise DataError with one line naming the URI.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import ConfigError, DataError
from ..facts import FactSet
from ..redact import redact
from ._common import check_relations, relation_sort_key
from .lama import RELATIONS_FILE, load_lama
from .triples import TRIPLE_EXTENSIONS, load_triples_files

ENDPOINT_ENV_VARS = ("AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL")


def _split_userinfo(uri: str) -> tuple[str | None, str]:
    """(userinfo or None, `s3://bucket/prefix` without it)."""
    if not uri.startswith("s3://"):
        raise ConfigError(f"not an s3 URI: {redact(uri)!r} (expected s3://bucket/prefix)")
    rest = uri[len("s3://") :]
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    return (userinfo if at else None), f"s3://{host if at else authority}{slash}{path}"


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` (or `s3://KEY:SECRET@bucket/...`) -> ("bucket", "some/prefix").
    Raises ConfigError otherwise."""
    _, plain = _split_userinfo(uri)
    bucket, _, prefix = plain[len("s3://") :].partition("/")
    if not bucket:
        raise ConfigError(f"s3 URI without a bucket: {redact(uri)!r}")
    return bucket, prefix.strip("/")


def s3_credentials(uri: str) -> tuple[str, str] | None:
    """(access key id, secret access key) written in `s3://KEY:SECRET@bucket/...` (percent-decoded),
    None when the URI carries none. ConfigError when it carries a key without a secret."""
    from urllib.parse import unquote

    userinfo, _ = _split_userinfo(uri)
    if userinfo is None:
        return None
    key, colon, secret = userinfo.partition(":")
    if not key or not colon or not secret:
        raise ConfigError(
            f"{redact(uri)}: credentials in an s3 URI must be KEY:SECRET (percent-encode ':', '@' "
            "and '/' inside them), or leave them out and set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
        )
    return unquote(key), unquote(secret)


def endpoint_from_env() -> str | None:
    """The S3 endpoint override from `AWS_ENDPOINT_URL` or `MLFLOW_S3_ENDPOINT_URL`, if set."""
    for var in ENDPOINT_ENV_VARS:
        if os.environ.get(var):
            return os.environ[var]
    return None


def make_client(endpoint_url: str | None = None, credentials: tuple[str, str] | None = None) -> Any:
    """A boto3 S3 client for `endpoint_url` (or the env override) with short timeouts and few
    retries, so that an unreachable endpoint fails in seconds, not minutes. `credentials`
    (key id, secret) replace boto3's credential chain."""
    import boto3
    from botocore.config import Config

    keys = {"aws_access_key_id": credentials[0], "aws_secret_access_key": credentials[1]} if credentials else {}
    return boto3.client(
        "s3",
        **keys,
        endpoint_url=endpoint_url or endpoint_from_env(),
        config=Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 2, "mode": "standard"}),
    )


def _describe(err: Exception) -> str:
    """One line for a botocore error."""
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    if isinstance(err, ClientError):
        code = str(err.response.get("Error", {}).get("Code", ""))
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("NoSuchBucket",):
            return "bucket does not exist"
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled") or status == 403:
            return f"access denied ({code or status})"
        if code in ("NoSuchKey", "404") or status == 404:
            return "object not found"
        msg = err.response.get("Error", {}).get("Message", "")
        return f"S3 error {code or status}: {msg}".strip().rstrip(":")
    if isinstance(err, EndpointConnectionError):
        return f"cannot reach the S3 endpoint ({err.kwargs.get('endpoint_url', '?')})"
    if isinstance(err, NoCredentialsError):
        return "no AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    return f"{type(err).__name__}: {err}".splitlines()[0]


def list_keys(client: Any, bucket: str, prefix: str, uri: str) -> list[str]:
    """Keys under `prefix` as a folder, or `[prefix]` when it names one object.

    Raises DataError naming `uri` for S3 errors and when nothing is there.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    folder = f"{prefix}/" if prefix else ""
    keys: list[str] = []
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder):
            keys.extend(obj["Key"] for obj in page.get("Contents", []) if not obj["Key"].endswith("/"))
        if not keys and prefix:
            try:
                client.head_object(Bucket=bucket, Key=prefix)
                keys = [prefix]
            except ClientError as e:
                if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 404:
                    raise
    except (ClientError, BotoCoreError) as e:
        raise DataError(f"{uri}: {_describe(e)}") from None
    if not keys:
        raise DataError(f"{uri}: no objects under this prefix")
    return sorted(keys)


def _relative(key: str, prefix: str) -> PurePosixPath | None:
    """The key relative to the prefix folder; None for keys that would escape the download dir."""
    if key == prefix:
        rel = PurePosixPath(PurePosixPath(key).name)
    else:
        rel = PurePosixPath(key[len(prefix) + 1 :] if prefix else key)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        return None
    return rel


def _is_fact_file(rel: PurePosixPath) -> bool:
    return rel.name.startswith("P") and rel.suffix == ".jsonl"


def load_s3(uri: str, relations: list[str] | None = None, *, endpoint_url: str | None = None, client: Any = None) -> FactSet:
    """Download the facts under `uri` to a temporary folder and read them (module docstring).

    `client` may be a ready boto3 S3 client (tests, custom sessions); otherwise one is made
    for `endpoint_url` / the env override. The FactSet's `source` is the URI.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = parse_s3_uri(uri)
    credentials = s3_credentials(uri)
    uri = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"  # messages and `source` never carry credentials
    client = client or make_client(endpoint_url, credentials)
    rel_keys = {rel: key for key in list_keys(client, bucket, prefix, uri) if (rel := _relative(key, prefix)) is not None}

    if any(_is_fact_file(rel) for rel in rel_keys):
        kind = "lama"
        known = dict.fromkeys(sorted({rel.stem for rel in rel_keys if _is_fact_file(rel)}, key=relation_sort_key))
        wanted = check_relations(relations, known, uri)
        chosen = {
            rel: key
            for rel, key in rel_keys.items()
            if rel.name == RELATIONS_FILE or (_is_fact_file(rel) and (wanted is None or rel.stem in wanted))
        }
    else:
        kind = "triples"
        chosen = {rel: key for rel, key in rel_keys.items() if rel.suffix.lower() in TRIPLE_EXTENSIONS}
        if not chosen:
            shown = ", ".join(str(r) for r in list(rel_keys)[:5]) + (", ..." if len(rel_keys) > 5 else "")
            raise DataError(f"{uri}: no P*.jsonl or triples files ({', '.join(TRIPLE_EXTENSIONS)}) among: {shown}")

    with tempfile.TemporaryDirectory(prefix="factprobe-s3-") as tmp:
        root = Path(tmp)
        for rel, key in chosen.items():
            target = root.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                client.download_file(bucket, key, str(target))
            except (ClientError, BotoCoreError) as e:
                raise DataError(f"s3://{bucket}/{key}: {_describe(e)}") from None
        try:
            if kind == "lama":
                facts = load_lama(_lama_root(root), relations)
            else:
                facts = load_triples_files([root.joinpath(*rel.parts) for rel in chosen], uri, relations)
        except (DataError, ConfigError) as e:
            raise type(e)(_rename(str(e), root, uri)) from None
    facts.source = uri
    return facts


def _lama_root(root: Path) -> Path:
    """The folder to hand to `load_lama`: the one holding `relations.jsonl` when there is
    exactly one, else the download root."""
    found = [p.parent for p in root.rglob(RELATIONS_FILE)]
    return found[0] if len(found) == 1 else root


def _rename(message: str, root: Path, uri: str) -> str:
    """Replace the temporary folder in a reader's message with the s3 URI."""
    for form in (str(root.resolve()), str(root)):
        message = message.replace(f"lama:{form}", uri).replace(f"triples:{form}", uri).replace(form, uri)
    return message
