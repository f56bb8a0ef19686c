"""Mask credentials in text before it is printed or logged.

`redact(text)` replaces, anywhere in `text`:

- the user-info of every URL: `https://user:token@host/x` -> `https://***@host/x` (any scheme,
  `postgresql+psycopg2://u:p@db` too; a password holding an unescaped `@` is masked whole);
- the value of secret query parameters: `?token=...`, `access_token`, `X-Amz-Signature`,
  `X-Amz-Credential`, `X-Amz-Security-Token`, `sig`, `key`, `password`, `secret`, ... -> `=***`;
- `Bearer <token>` / `Basic <credentials>` (e.g. an echoed Authorization header);
- `NAME=value` where NAME is an UPPER_CASE variable naming a password, token, secret or key.

Everything else is left as it is, so a message stays readable: `redact` is applied to every
`FactprobeError` message (`factprobe.errors`) and to the lines the tracking code prints.

`redact_values(obj)` applies `redact` to every string inside nested dicts, lists and tuples: what
a run stores (run_config.json, finetune_config.json, MLflow parameters) goes through it, while
the run itself keeps using the real values.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#\[\]'\"<>]*)@")
_SECRET_PARAM_NAME = (
    r"[\w.\-]*(?:token|secret|password|passwd|pwd|signature|credential|api[_\-]?key|access[_\-]?key|auth)[\w.\-]*"
    r"|key|sig|se?ssion"
)
_QUERY_PARAM = re.compile(rf"(?P<name>[?&;](?:{_SECRET_PARAM_NAME})=)(?P<value>[^&;\s#'\"<>]*)", re.IGNORECASE)
_AUTH_HEADER = re.compile(r"\b(?P<scheme>Bearer|Basic) (?P<value>[A-Za-z0-9._~+/\-]{8,}=*)")
_ENV_ASSIGNMENT = re.compile(
    r"\b(?P<name>[A-Z0-9_]*(?:PASSWORD|PASSWD|TOKEN|SECRET|ACCESS_KEY|API_KEY)[A-Z0-9_]*)=(?P<value>[^\s'\"]+)"
)


def redact(text: object) -> str:
    """`text` (made a string) with URL credentials, secret query values, auth headers and
    secret `NAME=value` assignments replaced by `***` (module docstring)."""
    s = str(text)
    if not s:
        return s
    s = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", s)
    s = _QUERY_PARAM.sub(lambda m: f"{m['name']}{MASK}" if m["value"] else m[0], s)
    s = _AUTH_HEADER.sub(lambda m: f"{m['scheme']} {MASK}", s)
    s = _ENV_ASSIGNMENT.sub(lambda m: f"{m['name']}={MASK}" if m["value"] != MASK else m[0], s)
    return s


def redact_values(obj: Any) -> Any:
    """A copy of `obj` with `redact` applied to every string inside dicts, lists and tuples (at
    any depth; dict keys are kept); other values are returned as they are. `obj` is not changed."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_values(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_values(v) for v in obj]
    return obj
