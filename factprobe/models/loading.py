"""Load a language model through one entry point: `load_model`.

`load_model` takes an alias, a local folder, a hub id or a PEFT adapter folder (see
`factprobe.models.hub` for how names resolve), loads causal LMs with `AutoModelForCausalLM` and
masked LMs (BERT-style `[MASK]`) with `AutoModelForMaskedLM`, and says which kind it got in
`LoadedModel.kind`. Probes that accept only some kinds call `require_kind`.

`trust_remote_code` is never enabled unless the caller passes `trust_remote_code=True`.
Tiny random models (`factprobe.models.testing`) exist for unit tests only; `LoadedModel.is_random`
is True for them and their results must never be reported as real-model results.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from factprobe.errors import ConfigError, ModelError
from factprobe.identity import folder_revision
from factprobe.lm import served
from factprobe.lm._util import first_line
from factprobe.lm.device import dtype_name, resolve_device, resolve_dtype
from factprobe.models import adapters, gguf_cache
from factprobe.models.hub import _resolve, _Resolved

if TYPE_CHECKING:  # heavy imports stay lazy so `factprobe --help` is fast
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

#: Context windows longer than this are capped (`LoadedModel.max_length`): probing prompts are
#: short, and a 32k window would only invite quadratic-memory accidents.
MAX_LENGTH_CAP = 8192
#: Used when a config names no context window at all.
DEFAULT_MAX_LENGTH = 2048

#: What `kind=` accepts; "auto" reads the config (`detect_kind`).
ModelKind = Literal["causal", "masked"]
_KINDS = ("causal", "masked")


@dataclass
class LoadedModel:
    """A language model ready for probing.

    - `model`: in eval mode, on `device`, with parameters in `dtype`. For an adapter it is a
      `peft.PeftModel` (not merged) on the base model; `factprobe.lm.body.decoder_parts` finds
      body and head in either case.
    - `tokenizer`: has a pad token (eos is used when the model defines none);
      `tokenizer.model_max_length == max_length`. Padding side is left as the model ships it.
    - `name`: the name the caller gave (alias, hub id or path as written).
    - `path`: the folder it was loaded from (the adapter folder for an adapter).
    - `revision`: identifies the weights by their bytes: `gguf-sha256:<hex>` for aliases (and for a
      folder whose files are byte for byte the cached conversion's; the cached folder is rebuilt when
      its bytes are not), `hub:<id>@<commit>` for hub models, `local-sha256:<hex>` (sha256 over the
      bytes of the folder's files, each file hashed once per machine: `factprobe.identity.file_sha256`)
      for local folders, whatever a `factprobe_complete.json` in them claims, and
      `adapter-sha256:<hex>+<base revision>` for an adapter on its base.
    - `max_length`: context window from the config, capped at `MAX_LENGTH_CAP`.
    - `source`: "alias", "local" or "hub" (how `name` resolved; for an adapter, how the adapter
      folder resolved).
    - `is_random`: True for tiny random test models (or adapters on one); never report their
      numbers as results.
    - `kind`: "causal" (next-token LM) or "masked" (BERT-style `[MASK]` LM).
    - `adapter_path`: the PEFT adapter folder, or None for a plain model.
    - `base_name` / `base_path`: for an adapter, the base model's name (from the adapter config
      or `base_model=`) and the folder it was loaded from; None for a plain model.
    - `device_map`: the accelerate strategy that split the model ("auto", "balanced", "sequential"), or
      None for a model on one device. A split model's layers sit on several devices (`model.hf_device_map`);
      `device` is then where its inputs go (its embedding's device).
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    path: Path
    device: torch.device
    dtype: torch.dtype
    revision: str
    max_length: int
    source: str = "local"
    is_random: bool = False
    has_chat_template: bool = False
    kind: str = "causal"
    adapter_path: Path | None = None
    base_name: str | None = None
    base_path: Path | None = None
    device_map: str | None = None

    @property
    def dtype_name(self) -> str:
        """Name of `dtype` without the torch prefix: float32, bfloat16 or float16."""
        return dtype_name(self.dtype)

    def make_scorer(self, token_budget: int | None = None) -> Any:
        """The shared-prefix scorer on this model (`factprobe.lm.scorer.Scorer`, a
        `factprobe.lm.interface.ScoringEngine`), as a served model makes its own."""
        from factprobe.lm.scorer import Scorer

        return Scorer(self.model, self.tokenizer, device=self.device, token_budget=token_budget, max_length=self.max_length)

    def make_generator(self, token_budget: int | None = None) -> Any:
        """The generation engine on this model (`factprobe.lm.generate.Generator`, a
        `factprobe.lm.interface.GenerationEngine`)."""
        from factprobe.lm.generate import Generator

        return Generator(self.model, self.tokenizer, device=self.device, token_budget=token_budget, max_length=self.max_length)


def require_kind(loaded: LoadedModel, accepted: Sequence[str], probe: str) -> None:
    """Raise `ConfigError` unless `loaded.kind` is one of `accepted` (kinds a probe can run on).

    The message is one line naming the model, its kind and what the probe accepts, e.g.
    "model ./bert is a masked LM; probe ic-lke accepts causal LMs only".
    """
    unknown = [k for k in accepted if k not in _KINDS]
    if not accepted or unknown:
        raise ValueError(f"accepted kinds must be a non-empty subset of {_KINDS}, got {accepted!r}")
    if loaded.kind in accepted:
        return
    what = " or ".join(accepted) + " LMs" + (" only" if len(accepted) == 1 else "")
    raise ConfigError(f"model {loaded.name} is a {loaded.kind} LM; probe {probe} accepts {what}")


def detect_kind(config: Any) -> ModelKind:
    """ "masked" or "causal" from a transformers config, without loading weights.

    Masked when `architectures` names a `...ForMaskedLM` class, or when the config's model type
    has no causal-LM class but a masked-LM one (also via a custom `auto_map`), or has both (BERT,
    RoBERTa, ...) and the config is not flagged `is_decoder`; causal otherwise.
    """
    archs = getattr(config, "architectures", None) or []
    if any(str(a).endswith("ForMaskedLM") for a in archs):
        return "masked"
    if any(str(a).endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "causal"
    auto_map = getattr(config, "auto_map", None) or {}
    if auto_map:
        causal = "AutoModelForCausalLM" in auto_map
        masked = "AutoModelForMaskedLM" in auto_map
    else:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

        causal = type(config) in MODEL_FOR_CAUSAL_LM_MAPPING
        masked = type(config) in MODEL_FOR_MASKED_LM_MAPPING
    if masked and causal:  # encoder families that can also be run as decoders
        return "causal" if getattr(config, "is_decoder", False) else "masked"
    return "masked" if masked else "causal"


def _folder_revision(folder: Path, prefix: str = "local") -> str:
    """Identify a folder by the bytes of its top-level files: `<prefix>-sha256:<hex>`
    (`factprobe.identity.folder_revision`: every file hashed once per machine, whatever its size).

    A model folder (`prefix` "local") whose files, its marker left aside, are byte for byte those of
    this machine's cached conversion of an alias is named by that alias's revision (`gguf-sha256:<hex>`,
    `factprobe.models.gguf_cache.converted_revision`), so a copy of a converted folder is the alias. A
    `factprobe_complete.json` in `folder` is never believed: a marker that claims a revision, in a copy
    with other weights saved into it or added to any folder, is one more file of the folder's bytes.
    An adapter folder is always its bytes."""
    if prefix == "local":
        named = gguf_cache.converted_revision(folder)
        if named is not None:
            return named
    return folder_revision(folder, prefix)


def model_revision(name_or_path: str | os.PathLike[str], base_model: str | os.PathLike[str] | None = None) -> str:
    """The content revision `load_model(name_or_path, base_model=base_model).revision` will have,
    without loading any weights (aliases are prepared, hub ids resolved, files hashed once)."""
    if served.is_served(name_or_path):  # a server (`openai:MODEL@URL`): no files to hash; it is asked
        return served.served_revision(name_or_path)
    res = _resolve(os.fspath(name_or_path))
    if res.is_adapter:
        base_name = os.fspath(base_model) if base_model is not None else adapters.adapter_base_name(res.path)
        base = _resolve(base_name)
        return f"{_folder_revision(res.path, 'adapter')}+{base.revision or _folder_revision(base.path)}"
    return res.revision or _folder_revision(res.path)


def context_window(config: Any, tokenizer: Any | None = None) -> int:
    """Usable context length: the config's position limit, capped at `MAX_LENGTH_CAP`."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    for attr in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length", "seq_length"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return min(value, MAX_LENGTH_CAP)
    tml = getattr(tokenizer, "model_max_length", None)
    if isinstance(tml, int) and 0 < tml < 1_000_000:
        return min(tml, MAX_LENGTH_CAP)
    return DEFAULT_MAX_LENGTH


@dataclass(frozen=True)
class Placement:
    """How a split model is placed (accelerate big-model inference): `device_map` strategy ("auto",
    "balanced", "sequential"), `max_memory` in accelerate's form ({0: "20GiB", "cpu": "60GiB"}) or None
    for accelerate's estimate, and the folder for layers offloaded to disk."""

    device_map: str
    max_memory: dict | None
    offload_folder: str | None  # None: a temporary folder, removed with the model


def _placement(
    device_map: str | None, max_memory: str | dict | None, offload_folder: str | os.PathLike[str] | None, dev: torch.device
) -> Placement | None:
    """The validated `Placement`, None when no `device_map` is asked for. On a CPU device only the CPU
    (and disk) may hold layers: `max_memory` naming a GPU is an error there, and the GPUs accelerate
    would see are left out."""
    from factprobe.models.placement import check_placement, parse_max_memory

    dm, mm = check_placement(
        device_map, max_memory if not isinstance(max_memory, dict) else ",".join(f"{k}={v}" for k, v in max_memory.items())
    )
    if dm is None:
        return None
    memory = parse_max_memory(mm)
    if dev.type == "cpu":
        gpus = [k for k in (memory or {}) if isinstance(k, int)]
        if gpus:
            raise ConfigError(
                f"max_memory names GPU {gpus[0]} but the device is cpu; name only cpu and disk, or run with --device cuda"
            )
        # only the CPU (then disk) may hold layers, even where accelerate would see GPUs
        memory = {"cpu": _default_cpu_memory(), **(memory or {})}
    return Placement(dm, memory, None if offload_folder is None else os.fspath(offload_folder))


def _default_cpu_memory() -> int:
    """Bytes of CPU memory a split may use when `max_memory` does not say: accelerate's estimate."""
    from accelerate.utils import get_max_memory

    return int(get_max_memory().get("cpu", 0)) or 2**34


def _load_from(
    path: Path,
    dev: torch.device,
    dt: torch.dtype,
    trust_remote_code: bool,
    attn_implementation: str | None,
    kind: str,
    placement: Placement | None = None,
) -> tuple[Any, Any, ModelKind]:
    """Config, tokenizer and model from `path`. Without `placement` the model is moved to `dev`; with one,
    accelerate places its layers (`from_pretrained(device_map=, max_memory=, offload_folder=)`), after
    `check_fits` said in one line whether it fits at all, and nothing is moved."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    kwargs: dict[str, Any] = {"trust_remote_code": bool(trust_remote_code), "local_files_only": True}
    # The config first: custom code is refused here with transformers' clear message.
    config = AutoConfig.from_pretrained(path, **kwargs)
    got: ModelKind = detect_kind(config) if kind == "auto" else kind  # type: ignore[assignment]
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    auto_cls = AutoModelForMaskedLM if got == "masked" else AutoModelForCausalLM
    if placement is None:
        model = auto_cls.from_pretrained(path, config=config, dtype=dt, **kwargs)
        model.to(dev)
    else:
        import shutil
        import tempfile
        import weakref

        from factprobe.lm.device import check_fits, describe_device_map

        folder = placement.offload_folder
        check_fits(path.name, auto_cls, config, dt, placement.max_memory, folder or tempfile.gettempdir())
        temporary = tempfile.mkdtemp(prefix="factprobe-offload-") if folder is None else None
        try:
            model = auto_cls.from_pretrained(
                path,
                config=config,
                dtype=dt,
                device_map=placement.device_map,
                max_memory=placement.max_memory,
                offload_folder=folder or temporary,
                **kwargs,
            )
        except BaseException:
            if temporary:
                shutil.rmtree(temporary, ignore_errors=True)
            raise
        if temporary:  # the offloaded layers are read while the model lives
            weakref.finalize(model, shutil.rmtree, temporary, True)
        log.info(
            "factprobe: %s split by accelerate (%s): %s",
            path.name,
            placement.device_map,
            describe_device_map(getattr(model, "hf_device_map", {}) or {}),
        )
    model.eval()
    return model, tokenizer, got


def _load_resolved(
    name: str,
    res: _Resolved,
    dev: torch.device,
    dt: torch.dtype,
    trust_remote_code: bool,
    attn_implementation: str | None,
    kind: str,
    placement: Placement | None = None,
) -> tuple[Any, Any, ModelKind]:
    """`_load_from` with one-line errors; a cached alias that fails to load is rebuilt once."""
    try:
        return _load_from(res.path, dev, dt, trust_remote_code, attn_implementation, kind, placement)
    except (ModelError, ConfigError):
        raise
    except Exception as err:
        if res.kind != "alias":
            hint = ""
            if "custom code" in str(err) or "trust_remote_code" in str(err):
                hint = " (the model ships its own code; factprobe runs it only when trust_remote_code=True is passed)"
            raise ModelError(f"cannot load model {name!r} from {res.path}: {first_line(err)}{hint}") from err
        log.warning("factprobe: cached model %r at %s failed to load (%s); rebuilding it", name, res.path, first_line(err))
    gguf_cache.prepare_alias(name, force=True)
    try:
        return _load_from(res.path, dev, dt, trust_remote_code, attn_implementation, kind, placement)
    except Exception as err2:
        raise ModelError(f"cannot load model {name!r} from {res.path} even after rebuilding it: {first_line(err2)}") from err2


def _connect_served(name: str, kind: str, base_model: Any, device_map: str | None, max_memory: Any) -> Any:
    """`served.connect(name)`, after refusing what does not apply to a server (one line each)."""
    for option, value in (("base_model", base_model), ("device_map", device_map), ("max_memory", max_memory)):
        if value:
            raise ConfigError(
                f"{option}={value!r} does not apply to the served model {name} (the server places "
                f"its model); drop {option} or name a local model"
            )
    if kind == "masked":
        raise ConfigError(f"the served model {name} is a causal LM (completions API); kind='masked' does not apply")
    return served.connect(name, tokenizer_of=served_tokenizer)


def served_tokenizer(model: str) -> Any:
    """The tokenizer of the model the server names `model`, resolved like any factprobe model name (alias,
    local folder, hub id); a pad token is set from EOS where missing. ConfigError (one line) when it cannot be."""
    try:
        res = _resolve(model)
    except (ConfigError, ModelError) as err:
        raise ConfigError(
            f"served model {model!r}: its tokenizer is needed and the name does not resolve here ({err}); "
            "serve it under an alias, a local folder or a hub id factprobe can load "
            "(vLLM: --served-model-name)"
        ) from None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(res.path, local_files_only=True)
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(
    name_or_path: str | os.PathLike[str],
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    trust_remote_code: bool = False,
    *,
    attn_implementation: str | None = None,
    kind: str = "auto",
    base_model: str | os.PathLike[str] | None = None,
    device_map: str | None = None,
    max_memory: str | dict | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
) -> LoadedModel:
    """Resolve `name_or_path` (see `resolve_model_path`) and load model + tokenizer.

    `device="auto"` is CUDA when available, else CPU; `dtype="auto"` is bfloat16 on CUDA and
    float32 on CPU (strings "float32", "bfloat16", "float16" or a torch.dtype also work).
    `trust_remote_code` is passed to transformers as given and defaults to False, so custom
    model code shipped with a folder is never executed unless asked for.
    `attn_implementation` (e.g. "eager", "sdpa") is passed through when set; the default is
    transformers' own choice (sdpa), which matches eager to ~1e-5 for both aliases.
    `kind`: "auto" (read the config: `detect_kind`), "causal" or "masked".
    A PEFT adapter folder (`adapter_config.json`) is loaded on its base model, named by the
    adapter's `base_model_name_or_path` and resolved like any name; `base_model` overrides
    that name (and is an error for anything but an adapter). The tokenizer is the adapter's
    when its folder ships one, else the base's.
    A cached alias folder that fails to load is rebuilt once (one warning line) and reloaded.
    `device_map` ("auto", "balanced", "sequential") splits the model across the devices with accelerate
    (`from_pretrained(device_map=...)`; on a CPU device: the CPU, then disk), within `max_memory`
    (`0=20GiB,cpu=60GiB`, a JSON object or accelerate's dict; default: accelerate's estimate), layers that
    fit nowhere going to `offload_folder` (default: a new temporary folder). A model too large even
    for that is refused in one line before loading. `LoadedModel.device` is then where inputs go (the
    embedding's device) and `LoadedModel.device_map` the strategy; PEFT adapters cannot be split yet.
    `openai:MODEL@URL` names a model behind an OpenAI-compatible server: a `factprobe.lm.served.ServedModel`
    is returned (connected and checked; no weights are loaded; `device`, `dtype` do not apply).
    Raises `ModelError` / `ConfigError` with one clear line for everything a user can cause.
    """
    if kind not in ("auto", *_KINDS):
        raise ConfigError(f"unknown model kind {kind!r}: use 'auto', 'causal' or 'masked'")
    if served.is_served(name_or_path):
        return _connect_served(os.fspath(name_or_path), kind, base_model, device_map, max_memory)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    placement = _placement(device_map, max_memory, offload_folder, dev)
    name = os.fspath(name_or_path)
    res = _resolve(name)
    adapter_dir: Path | None = None
    base_name, base = name, res
    if res.is_adapter:
        adapter_dir = res.path
        overridden = base_model is not None
        base_name = os.fspath(base_model) if overridden else adapters.adapter_base_name(adapter_dir)
        try:
            base = _resolve(base_name)
        except (ModelError, ConfigError) as err:
            raise adapters.missing_base_error(adapter_dir, base_name, err, overridden) from err
        if base.is_adapter:
            raise ModelError(
                f"adapter {adapter_dir} names another adapter ({base.path}) as its "
                "base; pass a full model with --base-model (base_model=)"
            )
    elif base_model is not None:
        raise ConfigError(
            f"base_model={os.fspath(base_model)!r} applies only to PEFT adapter folders, and {name!r} is a full model"
        )
    if placement is not None and adapter_dir is not None:
        raise ConfigError(
            f"--device-map cannot split a model with a PEFT adapter ({adapter_dir}) yet; "
            "merge the adapter into its base (peft merge_and_unload) and split that folder"
        )
    model, tokenizer, got = _load_resolved(base_name, base, dev, dt, trust_remote_code, attn_implementation, kind, placement)
    if placement is not None:
        from factprobe.lm.device import input_device

        dev = input_device(model, dev)
    max_length = context_window(model.config, tokenizer)
    revision = base.revision or _folder_revision(base.path)
    is_random = bool(getattr(model.config, "factprobe_random_weights", False)) or "random" in base.path.name.lower()
    if adapter_dir is not None:
        model = adapters.attach_adapter(model, adapter_dir, dev, dt)
        revision = f"{_folder_revision(adapter_dir, 'adapter')}+{revision}"
        own = adapters.adapter_tokenizer_folder(adapter_dir)
        if own is not None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(own, local_files_only=True, trust_remote_code=bool(trust_remote_code))
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.model_max_length = max_length
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        path=res.path,
        device=dev,
        dtype=dt,
        revision=revision,
        max_length=max_length,
        source=res.kind,
        is_random=is_random,
        has_chat_template=getattr(tokenizer, "chat_template", None) is not None,
        kind=got,
        adapter_path=adapter_dir,
        base_name=base_name if adapter_dir else None,
        base_path=base.path if adapter_dir else None,
        device_map=placement.device_map if placement is not None else None,
    )
