"""The contract every study implements (`factprobe study NAME`).

A study is an experiment that the papers' figures come from (the examples curve, the position
study, the findings table). Unlike a probe it is not a per-fact loop with a checkpoint: it runs
once into a claimed output folder (`factprobe.run_folder.claim(out, "study", name)`) and
returns its metrics, which the CLI writes atomically to `<out>/metrics.json`.

Contract of a study (its module registers one instance, `register(MyStudy())`: factprobe/studies/registry.py,
which also loads plug-in study modules; docs/extending.md walks through one):
- `name` (the CLI's subcommand), `description` (one line), `config_class` (a `ConfigBase`
  dataclass of its own options, one `--flag` per field, validated in `__post_init__`);
- `uses_base`: whether the `BaseConfig` flags (model, source, data, relations, seed, ...) apply;
- `loads_model`: whether it loads `base.model` (default True). A study that uses the base flags for
  its data only sets it False: its configuration then names no model (`factprobe.studies.cli.study_config`
  drops `model` and `base_model`), so its identity hashes no weights, its folder and MLflow run are not
  named after a model and its run is not tagged with one (tracking/study_run.py);
- `headline_metric` (`StudyHeadline` or None): the run's one number, a key of its `flat_metrics`, and
  whether higher or lower is better; logged as `headline/<study name>` with the tag `factprobe.headline`
  (metric, value, direction), the primary metric of the study's MLflow experiment. None: the study has
  no one number (the findings table) and no headline is logged;
- `prepare(ctx)` reads and checks the study's data (no model, nothing scored, nothing written),
  raising ConfigError/DataError for bad input; what it returns is `ctx.prepared` in `run`. The CLI
  calls it before it writes `study_config.json` or opens the MLflow run (`factprobe.studies.cli.run_study`),
  so a study refused on its data leaves no run and no files, as a probe refused on its data does.
  Default: nothing to check (`None`);
- `run(ctx)` does the work. It writes its own files (jsonl tables, PNG figures) into `ctx.out`
  with the atomic writers of `factprobe.io` and returns the metrics dict (JSON-able; NaN allowed,
  written as null). It must not write `metrics.json` itself;
- `summary(metrics)` gives the console lines (what was measured, in words and numbers);
- `flat_metrics(metrics)` gives the scalars for MLflow (`name -> float`, names as in
  `tracking/conventions.py`: `a-z0-9_/.`), default: every top-level number;
- `figures(out)`: the PNG files of the run (default: every `*.png` in `out`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..config import ConfigBase
from ..framework.config import BaseConfig


@dataclass
class StudyContext:
    """What one study run gets: its configs, its (claimed, existing) output folder, and whether
    to show progress bars. `note(msg)` prints a one-line notice (a capped n, a dropped relation)
    to stderr and keeps it for `metrics.json`'s `notes`.

    For runs without a terminal (a pipeline step's pod log, where no bar is drawn): `step(msg)` is
    called with one line when a stage of the study starts (e.g. "gemma-3-270m: coherency (14/18)"),
    and `batch_progress(label)` gives a probe's `on_batch(done, total)` callback (or None). Both do
    nothing by default. `prepared`: what `Study.prepare` returned (None before it ran)."""

    base: BaseConfig | None
    cfg: ConfigBase
    out: Path
    progress: bool
    note: Callable[[str], None]
    step: Callable[[str], None] = field(default=lambda msg: None)
    batch_progress: Callable[[str], Callable[[int, int], None] | None] = field(default=lambda label: None)
    prepared: Any = None


@dataclass(frozen=True)
class StudyHeadline:
    """A study's headline number: `metric`, a key of the study's `flat_metrics`; `higher_is_better`
    (False: lower is better, e.g. the number of examples a curve needs to saturate); `label`: a short
    description for people (default: the metric)."""

    metric: str
    higher_is_better: bool = True
    label: str = ""

    def __post_init__(self) -> None:
        if not self.metric:
            raise ValueError("StudyHeadline needs a metric (a key of the study's flat_metrics)")

    def row(self, flat: Mapping[str, float]) -> dict[str, Any] | None:
        """{"metric", "value", "higher_is_better", "label"} from a run's flat metrics; None when the run
        has no finite value for the metric (e.g. a curve that never saturates)."""
        value = flat.get(self.metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return None
        return {
            "metric": self.metric,
            "value": float(value),
            "higher_is_better": self.higher_is_better,
            "label": self.label or self.metric,
        }


class Study:
    """Base class of a study (module docstring)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    config_class: ClassVar[type[ConfigBase]] = ConfigBase
    uses_base: ClassVar[bool] = True
    loads_model: ClassVar[bool] = True
    headline_metric: ClassVar[StudyHeadline | None] = None

    def prepare(self, ctx: StudyContext) -> Any:
        """Read and check the study's data before anything is opened or written (module docstring);
        the result becomes `ctx.prepared`. Default: None."""
        return None

    def run(self, ctx: StudyContext) -> dict[str, Any]:
        raise NotImplementedError

    def summary(self, metrics: Mapping[str, Any]) -> list[str]:
        return []

    def flat_metrics(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def headline_row(self, metrics: Mapping[str, Any]) -> dict[str, Any] | None:
        """The run's headline (`StudyHeadline.row` over `flat_metrics(metrics)`); None without one."""
        return self.headline_metric.row(self.flat_metrics(metrics)) if self.headline_metric else None

    def names_model(self) -> bool:
        """Whether a configuration of this study names `base.model`: it uses the base flags and loads a model."""
        return self.uses_base and self.loads_model

    def figures(self, out: Path) -> list[Path]:
        return sorted(Path(out).glob("*.png"))
