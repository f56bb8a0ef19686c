"""Resolve a model name to a local folder: alias, local folder (model or adapter), hub id.

Names are tried in this order:

1. **Aliases** (`factprobe.models.aliases`): prepared in the cache (`factprobe.models.gguf_cache`), whose
   folder is proven to hold byte for byte what the conversion wrote (else rebuilt) before it is
   given the alias revision `gguf-sha256:<hex>`. A local folder's revision is computed from its
   bytes by `factprobe.models.loading` (`_Resolved.revision` None).
2. **Local folders** holding a Hugging Face model (`config.json`) or a PEFT adapter
   (`adapter_config.json`; its base model is resolved by `factprobe.models.adapters`).
3. **Hub ids** (`org/name`, or `org/name@REV` pinned to a commit, branch or tag), tried only when the
   name is neither an alias nor an existing path. The revision recorded is the resolved commit.
   The hub is asked with a short timeout (`FACTPROBE_HUB_TIMEOUT`, default 10 s); offline mode
   (`HF_HUB_OFFLINE=1` or `TRANSFORMERS_OFFLINE=1`) and the local Hugging Face cache are
   honoured. Failure is one clear `ModelError` line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from factprobe.errors import ConfigError, ModelError
from factprobe.lm._util import first_line, say
from factprobe.models.aliases import _REGISTRY
from factprobe.models.gguf_cache import prepare_alias

#: File that marks a folder as a PEFT adapter (written by `PeftModel.save_pretrained`).
ADAPTER_CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class _Resolved:
    path: Path
    kind: Literal["alias", "local", "hub"]
    revision: str | None  # None: compute from the folder's files

    @property
    def is_adapter(self) -> bool:
        """True when `path` holds a PEFT adapter rather than a full model."""
        return is_adapter_folder(self.path)


def is_adapter_folder(path: Path) -> bool:
    """True when `path` is a folder holding a PEFT adapter (`adapter_config.json`)."""
    return path.is_dir() and (path / ADAPTER_CONFIG).is_file()


def _is_model_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "config.json").is_file() or is_adapter_folder(path))


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_REVISION = re.compile(r"^[\w./-]+$")
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.py", "*.tiktoken"]


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _hub_offline() -> bool:
    return _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE")


def _hub_timeout() -> float:
    try:
        return float(os.environ.get("FACTPROBE_HUB_TIMEOUT", "10"))
    except ValueError:
        return 10.0


def _hub_cache_dir() -> str | None:
    """HF_HUB_CACHE / HF_HOME read at call time (huggingface_hub reads them at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~", ".\\")) or "\\" in name or name.count("/") > 1 or name in (".", "..")


def _unknown(name: str, why: str) -> ModelError:
    return ModelError(f"unknown model {name!r}: not an alias (known: {', '.join(_REGISTRY)}), not a local folder, and {why}")


def _resolve_hub(repo_id: str, revision: str | None = None) -> _Resolved:
    """Download (or find in the HF cache) a hub model at `revision` (a commit, branch or tag; default
    the main branch); never hangs longer than the timeout. The revision recorded is the commit."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    endpoint = os.environ.get("HF_ENDPOINT") or None
    timeout = _hub_timeout()
    reason: str
    if _hub_offline():
        reason = "the Hugging Face hub is switched off (HF_HUB_OFFLINE=1)"
    else:
        try:
            info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, timeout=timeout)
        except RepositoryNotFoundError:
            raise _unknown(repo_id, "the Hugging Face hub returned 'repository not found'") from None
        except GatedRepoError:
            raise _unknown(
                repo_id, "the Hugging Face hub says the repository is gated (log in with a token that has access)"
            ) from None
        except HFValidationError:
            raise _unknown(repo_id, "it is not a valid Hugging Face hub id") from None
        except HfHubHTTPError as err:
            code = getattr(getattr(err, "response", None), "status_code", None)
            raise _unknown(repo_id, f"the Hugging Face hub returned HTTP {code or '?'}") from None
        except Exception as err:  # noqa: BLE001 - connection, DNS, timeout, proxy errors
            reason = f"the Hugging Face hub is unreachable ({first_line(err)})"
        else:
            say(f"downloading {repo_id} from the Hugging Face hub (revision {info.sha}) ...")
            names = [s.rfilename for s in (info.siblings or [])]
            patterns = list(_HUB_PATTERNS)
            if not any(n.endswith(".safetensors") for n in names):
                patterns.append("*.bin")  # old repos ship only PyTorch pickles
            try:
                path = snapshot_download(
                    repo_id,
                    revision=info.sha,
                    allow_patterns=patterns,
                    endpoint=endpoint,
                    etag_timeout=timeout,
                    cache_dir=_hub_cache_dir(),
                )
            except Exception as err:
                raise ModelError(f"cannot download {repo_id!r} from the Hugging Face hub: {first_line(err)}") from err
            return _Resolved(Path(path), "hub", f"hub:{repo_id}@{info.sha}")
    # Offline or unreachable: a copy in the local Hugging Face cache is still fine.
    try:
        path = snapshot_download(repo_id, revision=revision, local_files_only=True, cache_dir=_hub_cache_dir())
    except (LocalEntryNotFoundError, HFValidationError, OSError, ValueError):
        at = f" at revision {revision}" if revision else ""
        raise _unknown(repo_id, f"{reason}, nor is it{at} in the local Hugging Face cache") from None
    p = Path(path)
    if not _is_model_folder(p):
        raise _unknown(
            repo_id, f"{reason}, and its copy in the local Hugging Face cache has no config.json (nor {ADAPTER_CONFIG})"
        )
    return _Resolved(p, "hub", f"hub:{repo_id}@{p.name}")


def _resolve(name_or_path: str | os.PathLike[str]) -> _Resolved:
    """Resolve one name (see the module docstring); adapter folders are returned as they are."""
    name = os.fspath(name_or_path)
    if not name.strip():
        raise ConfigError("model name is empty")
    if name in _REGISTRY:
        return _Resolved(prepare_alias(name), "alias", _REGISTRY[name].revision)
    p = Path(name).expanduser()
    if p.exists():
        if _is_model_folder(p):
            return _Resolved(p.resolve(), "local", None)
        what = "a folder without config.json" if p.is_dir() else "a file, not a folder"
        raise ModelError(
            f"model path {name!r} is {what}; expected a Hugging Face model folder, "
            f"a PEFT adapter folder or an alias (known: {', '.join(_REGISTRY)})"
        )
    if _looks_like_path(name):
        raise ModelError(
            f"unknown model {name!r}: not an alias (known: {', '.join(_REGISTRY)}), and no local folder exists at {p.resolve()}"
        )
    repo_id, at, revision = name.partition("@")
    if at and not revision.strip():
        raise _unknown(name, "it names no revision after '@' (pin one as org/name@COMMIT)")
    if not _HUB_ID.match(repo_id) or ".." in repo_id or "--" in repo_id or (at and not _REVISION.match(revision)):
        raise _unknown(name, "not a valid Hugging Face hub id (org/name, or org/name@REVISION to pin a commit)")
    return _resolve_hub(repo_id, revision or None)


def resolve_model_path(name_or_path: str) -> Path:
    """The local folder to pass to `from_pretrained` for an alias, local folder or hub id.

    Aliases are prepared first (download + conversion, once; corrupt caches are rebuilt).
    Local folders must contain `config.json` (a model) or `adapter_config.json` (a PEFT
    adapter, returned as it is: `load_model` resolves its base model). Hub ids are tried last, with a short timeout and
    respecting `HF_HUB_OFFLINE`; every failure is a `ModelError` with one explanatory line.
    """
    return _resolve(name_or_path).path
