"""`factprobe study findings`: the papers' qualitative claims, measured on your models, each judged
holds / does not hold / inconclusive (issue 20 item 6; the verdict logic is
`factprobe.metrics.findings`, the claims and their rules are listed there and in docs/findings.md).

Per model of `--models` it runs, into `<out>/<model folder name>/<step>/`:

- the probes `ic-lke`, `hgp`, `mmp` (the same multiple-choice items), `counterfactual`,
  `coherency` and `belief-icl` through `factprobe.framework.runner.run_probe`: each folder is a
  normal probe run, so a rerun after a kill resumes each probe from its checkpoint and a finished
  probe is not scored again;
- the studies `icl-examples` (the n curve) and `icl-sequence` four times (`--kind unknown` and
  `--kind incorrect`, each with random and with block placement; `--train-data` only as facts an
  incorrect or fictitious example must not match) through `factprobe.studies.cli.run_study`: a
  finished study folder is read back, not recomputed. A study that is not installed leaves its
  claims inconclusive ("not measured") with a note.

Sizes: `--relations` (LAMA relation ids), `--max-facts-per-relation` (the fact cap of every probe)
and `--budget` (`BUDGETS`: options per item, templates, the n grid and draws, the sequence length,
the counterfactual k values and exemplar draws (2 tiny, 3 small, 5 paper: the counterfactual interval
covers the draw), candidates, templates of BELIEF-ICL). `small` is the measured run's size (3 relations
x 8 facts; its time is in docs/findings.md); `paper` uses the papers' settings.
The resolved settings are written to `metrics.json` (`settings`).

Outputs: `metrics.json` (returned: `findings`, one record per claim and model, see
`Finding.to_dict`; `settings`; `runs`: the folder of every step), `findings.md` (the table and
each finding's detail) and `findings.png` (each finding's value and 95% interval against its
threshold). Only what was measured is claimed: the verdicts come from those numbers alone.

Over 500 lines: one study, its step list and the claim table it reads back; ruff format's one-argument-per-line calls
take it past 500.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigBase, option, split_relations
from ..errors import ConfigError
from ..framework.config import BaseConfig, RunConfig
from ..io import atomic_write_text, read_jsonl
from ..metrics import findings as fm
from .base import Study, StudyContext
from .registry import register

DEFAULT_MODELS = ("smollm2-135m-instruct", "gemma-3-270m")

#: what each budget runs (the knobs that decide the cost). `small`: the measured run (3 relations x 8 facts,
#: both models, docs/findings.md); `tiny`: tests (tiny random models); `paper`: the papers' settings.
BUDGETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "choices": 5,
        "examples": 4,
        "templates": "1",
        "n": [0, 1, 2, 4],
        "draws": 2,
        "exemplar_draws": 2,
        "length": 16,
        "replace": 4,
        "shots": [2, 3],
        "known_shots": 2,
        "qa_train_per_relation": 6,
        "max_new_tokens": 4,
        "max_candidates": 5,
        "belief_setting": "zero-shot",
        "belief_templates": 3,
        "max_answer_tokens": 3,
        "n_boot": 200,
        "fluctuation_draws": 200,
    },
    "small": {
        "choices": 10,
        "examples": 50,
        "templates": "1",
        "n": [0, 2, 10, 20],
        "draws": 3,
        "exemplar_draws": 3,
        "length": 200,
        "replace": 40,
        "shots": list(fm.PAPER_SHOTS),
        "known_shots": 10,
        "qa_train_per_relation": 20,
        "max_new_tokens": 8,
        "max_candidates": 20,
        "belief_setting": "zero-shot",
        "belief_templates": 4,
        "max_answer_tokens": 5,
        "n_boot": 2000,
        "fluctuation_draws": 2000,
    },
    "paper": {
        "choices": 100,
        "examples": 50,
        "templates": "paper",
        "n": [0, 1, 2, 5, 10, 20, 30, 50],
        "draws": 5,
        "exemplar_draws": 5,
        "length": 200,
        "replace": 40,
        "shots": list(fm.PAPER_SHOTS),
        "known_shots": 10,
        "qa_train_per_relation": 50,
        "max_new_tokens": 16,
        "max_candidates": None,
        "belief_setting": "zero-shot",
        "belief_templates": None,
        "max_answer_tokens": 10,
        "n_boot": 2000,
        "fluctuation_draws": 10000,
    },
}
PROBES = ("ic-lke", "hgp", "mmp", "counterfactual", "coherency", "belief-icl")
SEQUENCE_KINDS = ("unknown", "incorrect")
#: the icl-sequence steps: {step folder: (kind, placement)} (wu2024 Figures 2b-2e)
SEQUENCE_STEPS = {
    "icl-sequence-unknown": ("unknown", "random"),
    "icl-sequence-incorrect": ("incorrect", "random"),
    "icl-sequence-unknown-block": ("unknown", "block"),
    "icl-sequence-incorrect-block": ("incorrect", "block"),
}


@dataclass
class FindingsConfig(ConfigBase):
    """The findings study's options."""

    models: list[str] = option(list(DEFAULT_MODELS), "comma-separated models (aliases or folders)")
    relations: list[str] = option(["P36", "P1376", "P37"], "comma-separated LAMA T-REx relation ids")
    data: str | None = option(None, "LAMA folder (default: the data root's lama/)")
    train_data: str | None = option(
        None,
        "folder of P*.jsonl training facts (in-context examples, the counterfactual "
        "pool), e.g. ../shared/data/lpaqa/trex_train (default: split the test facts)",
    )
    max_facts_per_relation: int = option(8, "test facts per relation for every probe (a deterministic sample)")
    budget: str = option(
        "small",
        "what each step runs: tiny (tests), small (~30 min for two models on 2 cores), "
        "paper (the papers' settings); docs/findings.md lists them",
        choices=tuple(BUDGETS),
    )
    choices: int | None = option(
        None,
        "options per multiple-choice item (IC-LKE, HGP/MMP, the icl-examples curve); default: the budget's (10 small, 100 paper)",
    )
    max_candidates: int | None = option(
        None,
        "coherency: candidates per query, a seeded sample plus the answer (default: "
        "the budget's, 20 small, all under paper as youssef2024)",
    )
    seed: int = option(0, "seed of every step")
    device: str = option("auto", "auto | cpu | cuda[:i]", decides_results=False)
    dtype: str = option("auto", "auto | float32 | bfloat16 | float16", choices=("auto", "float32", "bfloat16", "float16"))

    def __post_init__(self) -> None:
        super().__post_init__()
        self.models = [m.strip() for m in (self.models.split(",") if isinstance(self.models, str) else self.models)]
        self.check(bool(self.models) and all(self.models), "models", self.models, "give at least one model")
        names = [Path(m).name for m in self.models]
        self.check(len(set(names)) == len(names), "models", self.models, "two models share a folder name")
        rels = split_relations(self.relations)
        self.check(bool(rels), "relations", self.relations, "give at least one LAMA relation id, e.g. P36,P19")
        self.relations = rels  # type: ignore[assignment]
        self.check(self.max_facts_per_relation >= 1, "max_facts_per_relation", self.max_facts_per_relation, "must be >= 1")
        self.check(self.max_candidates is None or self.max_candidates >= 2, "max_candidates", self.max_candidates, "must be >= 2")
        self.check(
            self.choices is None or self.choices >= 2, "choices", self.choices, "must be >= 2 (the answer and a distractor)"
        )

    def coherency_candidates(self) -> int | None:
        """Candidates per coherency query: `max_candidates`, else the budget's (None: all)."""
        return self.max_candidates if self.max_candidates is not None else BUDGETS[self.budget]["max_candidates"]

    def mc_choices(self) -> int:
        """Options per multiple-choice item: `choices`, else the budget's."""
        return self.choices if self.choices is not None else BUDGETS[self.budget]["choices"]


# ------------------------------------------------------------------ the steps
def _base(cfg: FindingsConfig, model: str, **over: Any) -> dict[str, Any]:
    d = {
        "model": model,
        "source": "lama",
        "data": cfg.data,
        "train_data": cfg.train_data,
        "relations": list(cfg.relations),
        "max_facts_per_relation": cfg.max_facts_per_relation,
        "seed": cfg.seed,
        "device": cfg.device,
        "dtype": cfg.dtype,
    }
    d.update(over)
    return d


def probe_configs(cfg: FindingsConfig, model: str) -> dict[str, RunConfig]:
    """{probe: RunConfig} of one model under the budget."""
    b = BUDGETS[cfg.budget]
    base = _base(cfg, model)
    mc = {**base, "choices": cfg.mc_choices(), "skip_small_relations": True}
    flat = {
        "ic-lke": {**mc, "examples": b["examples"]},
        "hgp": {**mc, "templates": b["templates"]},
        "mmp": {**mc, "templates": b["templates"]},
        "counterfactual": {
            **base,
            "shots": list(b["shots"]),
            "known_shots": b["known_shots"],
            "exemplar_draws": b["exemplar_draws"],
            "qa_train_per_relation": b["qa_train_per_relation"],
            "max_new_tokens": b["max_new_tokens"],
        },
        "coherency": {**base, "max_candidates": cfg.coherency_candidates()},
        # BELIEF-ICL reads --train-data as the other probes do: zero-shot it needs no examples, the training facts
        # only add correct objects (as for coherency), and its capped facts are then the multiple-choice probes'
        # (factprobe.datasets.cap.SOURCE_DRAW draws over their test facts), which the knowledge map joins on
        "belief-icl": {
            **base,
            "setting": b["belief_setting"],
            "samples": 0,
            "max_templates": b["belief_templates"],
            "max_answer_tokens": b["max_answer_tokens"],
            "draws": b["fluctuation_draws"],
        },
    }
    return {p: RunConfig.from_dict({"probe": p, **d}) for p, d in flat.items()}


def study_givens(cfg: FindingsConfig, model: str) -> dict[str, dict[str, Any]]:
    """{step folder: options} of the sub-studies (icl-examples; icl-sequence per kind)."""
    b = BUDGETS[cfg.budget]
    out = {
        "icl-examples": {
            **_base(cfg, model),
            "choices": cfg.mc_choices(),
            "skip_small_relations": True,
            "n": b["n"],
            "draws": b["draws"],
        }
    }
    for step, (kind, placement) in SEQUENCE_STEPS.items():  # the sequence is drawn from all facts of each relation
        out[step] = {
            **_base(cfg, model, max_facts_per_relation=None),
            "length": b["length"],
            "replace": b["replace"],
            "kind": kind,
            "placement": placement,
        }
    return out


def _rows(folder: Path) -> list[dict[str, Any]]:
    path = folder / "results.jsonl"
    return [r for _, r in read_jsonl(path)] if path.exists() else []


def _substudy(ctx: StudyContext, name: str, given: dict[str, Any], out: Path) -> dict[str, Any] | None:
    """Run (or read back) the registered study `name` into `out`; None when it is not installed."""
    from . import registry
    from .cli import run_study, study_config

    if name not in registry.available():
        ctx.note(f"study {name} is not installed; its claim is not measured")
        return None
    study = registry.get_study(name)
    known = set(study.config_class.field_names()) | (set(BaseConfig.field_names()) if study.uses_base else set())
    missing = sorted(k for k in given if k not in known)
    if missing:
        raise ConfigError(f"study {name} has no option(s) {', '.join(missing)} that findings sets")
    metrics, _, _ = run_study(study, study_config(study, given), out, progress=ctx.progress, batch_progress=ctx.batch_progress)
    return metrics


# ------------------------------------------------------------------ the steps of one model
def step_names(cfg: FindingsConfig, model: str) -> list[str]:
    """Every step folder of `model`, in the order `model_findings` runs them."""
    return list(PROBES) + list(study_givens(cfg, model))


class ModelSteps:
    """Runs (or reads back) the steps of one model into `out/<step>/`. The model is loaded once,
    for the first probe whose folder is not finished; the sub-studies load their own. `run(step)`
    returns the probe's `ProbeOutcome` or the sub-study's metrics (None: not installed). A step
    folder another live process writes raises `FolderBusyError` (`factprobe.run_folder`)."""

    def __init__(self, ctx: StudyContext, model: str, out: Path) -> None:
        self.ctx, self.model, self.out = ctx, model, out
        cfg: FindingsConfig = ctx.cfg  # type: ignore[assignment]
        self.probes = probe_configs(cfg, model)
        self.givens = study_givens(cfg, model)
        self.loaded: Any = None

    def finished(self, step: str) -> bool:
        """Whether the step's folder holds its finished run (its metrics.json, written last)."""
        return (self.out / step / "metrics.json").exists()

    def run(self, step: str) -> Any:
        if step in self.givens:
            given = self.givens[step]
            return _substudy(self.ctx, "icl-sequence" if step in SEQUENCE_STEPS else step, given, self.out / step)
        from ..framework.runner import load_for_probe, run_probe

        rc = self.probes[step]
        if self.loaded is None and not self.finished(step):
            self.loaded = load_for_probe(rc)
            if getattr(self.loaded, "is_random", False):
                self.ctx.note(f"{self.model} has RANDOM weights: these findings are not a result")
        return run_probe(
            rc,
            self.out / step,
            loaded=self.loaded,
            progress=self.ctx.progress,
            log=lambda m: print(m) if self.ctx.progress else None,
            on_batch=self.ctx.batch_progress(f"{step} {Path(self.model).name}"),
        )


# ------------------------------------------------------------------ the claims of one model
def model_findings(
    ctx: StudyContext, model: str, out: Path, runs: dict[str, str], stage: Callable[[str], None] = lambda name: None
) -> list[fm.Finding]:
    """Run every step of `model` into `out` and judge its claims; `stage(step name)` is called as each step starts."""
    cfg: FindingsConfig = ctx.cfg  # type: ignore[assignment]
    b = BUDGETS[cfg.budget]
    boot = {"n_boot": b["n_boot"], "seed": cfg.seed}
    rows: dict[str, list[dict[str, Any]]] = {}
    probe_metrics: dict[str, dict[str, Any]] = {}
    steps = ModelSteps(ctx, model, out)
    for probe in PROBES:
        runs[f"{model}/{probe}"] = str(out / probe)
        stage(probe)
        outcome = steps.run(probe)
        for n in outcome.notes:
            ctx.note(f"{model} {probe}: {n}")
        rows[probe] = outcome.results.to_dict("records")
        probe_metrics[probe] = outcome.metrics
    subs: dict[str, dict[str, Any] | None] = {}
    for step in steps.givens:
        runs[f"{model}/{step}"] = str(out / step)
        stage(step)
        subs[step] = steps.run(step)

    found = [fm.mc_vs_baseline(model, base, rows["ic-lke"], rows[base], **boot) for base in ("hgp", "mmp")]
    curve = subs["icl-examples"]
    found.append(
        fm.saturation(model, curve["curve"], curve.get("n_items"), **boot)
        if curve
        else fm.not_measured("saturation", model, "study icl-examples is not installed")
    )
    found += sequence_findings(model, out, subs, boot)
    cf = probe_metrics["counterfactual"]
    found.append(
        fm.counterfactual_over_k(
            model, rows["counterfactual"], b["shots"], shots_used=shots_used(cf), n_params=model_params(model), **boot
        )
    )
    found.append(fm.coherency_poor(model, rows["coherency"], **boot))
    found.append(fm.c1_above_c2(model, rows["coherency"], **boot))
    found.append(
        fm.prompt_fluctuation(
            model,
            rows["belief-icl"],
            n_draws=b["fluctuation_draws"],
            n_boot=min(b["n_boot"], 500),
            seed=cfg.seed,
            setting=b["belief_setting"],
        )
    )
    fluct = found[-1]
    fluct.detail["probe_acc_range"] = probe_metrics["belief-icl"].get("acc_range")
    return found


def sequence_findings(model: str, out: Path, subs: Mapping[str, Any], boot: Mapping[str, Any]) -> list[fm.Finding]:
    """The three icl-sequence claims from the four sequence steps' positions.jsonl (not measured when
    icl-sequence is not installed)."""
    claims = ("incorrect>unknown", "incorrect>unknown-block", "incorrect-block>random")
    if not all(subs.get(step) for step in SEQUENCE_STEPS):
        return [fm.not_measured(c, model, "study icl-sequence is not installed") for c in claims]
    pos = {step: [r for _, r in read_jsonl(out / step / "positions.jsonl")] for step in SEQUENCE_STEPS}
    return [
        fm.incorrect_vs_unknown(model, pos["icl-sequence-unknown"], pos["icl-sequence-incorrect"], **boot),
        fm.incorrect_vs_unknown(
            model, pos["icl-sequence-unknown-block"], pos["icl-sequence-incorrect-block"], placement="block", **boot
        ),
        fm.block_vs_random(model, pos["icl-sequence-incorrect-block"], pos["icl-sequence-incorrect"], **boot),
    ]


def shots_used(cf_metrics: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """{k asked: {Figure-7 setting: k used}} of the counterfactual probe's metrics."""
    out: dict[int, dict[str, Any]] = {}
    for e in cf_metrics.get("figure7", []):
        out.setdefault(int(e["shots"]), {})[e["setting"]] = e.get("shots_used")
    return out


def model_params(model: str) -> float | None:
    """The model's parameter count from its local folder (`report.model_meta.config_meta`), None when unknown."""
    from ..report.model_meta import config_meta

    try:
        return config_meta(model).size
    except Exception:  # noqa: BLE001 - a size we cannot read only drops the counterfactual's scale note
        return None


# ------------------------------------------------------------------ outputs
def findings_markdown(metrics: Mapping[str, Any]) -> str:
    """findings.md: the table, then each finding's detail."""
    lines = ["# Findings", "", fm.markdown_table(metrics["findings"]), "## Detail", ""]
    for f in metrics["findings"]:
        lines.append(f"### {f['model']}: {f['statement']} ({f['source']}): {fm.verdict_text(f)}")
        lines.append("")
        lines += [f"- {k}: {json.dumps(v)}" for k, v in f["detail"].items()]
        lines.append("")
    lines += ["## Settings", "", "```json", json.dumps(metrics.get("settings", {}), indent=1), "```", ""]
    return "\n".join(lines)


COLORS = {fm.HOLDS: "tab:green", fm.NOT_HOLDS: "tab:red", fm.INCONCLUSIVE: "tab:gray"}


def findings_figure(findings: list[Mapping[str, Any]]):
    """One row per finding: the value minus its threshold, signed so that positive is the claim's
    direction, with its 95% interval; colour = verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    below = {"coherency-poor", "saturation"}
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(findings) + 1.5))
    for i, f in enumerate(findings):
        thr = f["detail"].get("threshold", 0.0) or 0.0
        sign = -1.0 if f["claim"] in below else 1.0
        scale = float(f["detail"].get("n_max") or 1.0) if f["claim"] == "saturation" else 1.0  # n95 in units of n_max
        if f["value"] is None:
            ax.text(0, i, "not measured", va="center", fontsize=8, color="gray")
            continue
        v = sign * (f["value"] - thr) / scale
        lo, hi = f["ci"]
        if lo is not None and hi is not None:
            a, b = sorted((sign * (lo - thr) / scale, sign * (hi - thr) / scale))
            ax.plot([a, b], [i, i], color=COLORS[f["verdict"]], lw=2)
        ax.plot([v], [i], "o", color=COLORS[f["verdict"]])
    ax.axvline(0, color="black", lw=0.8, ls="--")
    # symlog: the sequence claims' differences (~0.01) and fluctuation's ratios (~1) both stay readable
    ax.set_xscale("symlog", linthresh=0.01)
    ax.relim()
    ax.autoscale_view()
    ax.set_yticks(range(len(findings)), [f"{f['model']}: {f['claim']}" for f in findings], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(
        "value - threshold in the claim's direction, 95% CI\n(> 0 supports it; saturation in units of n_max; linear within +-0.01)"
    )
    ax.set_title("findings: green holds, red does not hold, gray inconclusive")
    fig.tight_layout()
    return fig


def _slug(s: str) -> str:
    return "_".join("".join(c if c.isalnum() else " " for c in s.lower()).split())


class FindingsStudy(Study):
    name = "findings"
    description = "the papers' claims on your models: holds / does not hold / inconclusive, with numbers, 95% CI and n"
    config_class = FindingsConfig
    uses_base = False
    headline_metric = None  # a table of verdicts per claim and model: no one number

    def run(self, ctx: StudyContext) -> dict[str, Any]:
        from tqdm.auto import tqdm

        cfg: FindingsConfig = ctx.cfg  # type: ignore[assignment]
        runs: dict[str, str] = {}
        found: list[fm.Finding] = []
        metrics: dict[str, Any] = {
            "findings": [],
            "models": list(cfg.models),
            "relations": list(cfg.relations),
            "settings": {
                "budget": cfg.budget,
                **BUDGETS[cfg.budget],
                "choices": cfg.mc_choices(),
                "max_candidates": cfg.coherency_candidates(),
                "max_facts_per_relation": cfg.max_facts_per_relation,
                "train_data": cfg.train_data,
                "seed": cfg.seed,
            },
            "runs": runs,
        }
        total = len(cfg.models) * (len(PROBES) + len(study_givens(cfg, cfg.models[0])))
        started = iter(range(1, total + 1))
        for model in tqdm(cfg.models, desc="findings", unit="model", disable=not ctx.progress):
            name = Path(model).name
            found += model_findings(
                ctx,
                model,
                Path(ctx.out) / name,
                runs,
                stage=lambda s, name=name: ctx.step(f"{name}: {s} ({next(started)}/{total})"),
            )
            metrics["findings"] = [f.to_dict() for f in found]
            # after each model, so a run stopped during the next model leaves the finished models' table
            atomic_write_text(Path(ctx.out) / "findings.md", findings_markdown(metrics))
        from ..report.plots import save_png  # matplotlib loads only when a figure is drawn

        save_png(findings_figure(metrics["findings"]), Path(ctx.out) / "findings.png")
        return metrics

    def summary(self, metrics: Mapping[str, Any]) -> list[str]:
        """The findings table, one line per claim and model."""
        lines = [f"{'model':<24}{'claim':<24}{'verdict':<15}{'value':>8}  {'95% CI':<20}{'n':>6} unit"]
        for f in metrics.get("findings", []):
            lo, hi = f["ci"]
            ci = "n/a" if lo is None or hi is None else f"[{lo:+.3f}, {hi:+.3f}]"
            val = "n/a" if f["value"] is None else f"{f['value']:+.3f}"
            note = (f.get("detail") or {}).get("verdict_note")
            unit = f.get("unit") or (f.get("detail") or {}).get("unit", "")
            n = f["n_units"] if f.get("n_units") is not None else f["n"]
            how = "; ".join(x for x in (f.get("method"), f.get("signs")) if x)  # issue 37 item 5
            lines.append(
                f"{Path(f['model']).name:<24}{f['claim']:<24}{f['verdict']:<15}{val:>8}  {ci:<20}{n:>6} "
                f"{unit}" + (f"  {how}" if how else "") + (f"  ({note})" if note else "")
            )
        lines.append(fm.MULTIPLICITY_NOTE)
        return lines

    def flat_metrics(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        """`findings/<model>/<claim>/{value,ci_low,ci_high,n,verdict}` (verdict: 1 holds, -1 does not
        hold, 0 inconclusive); NaN-free."""
        code = {fm.HOLDS: 1.0, fm.NOT_HOLDS: -1.0, fm.INCONCLUSIVE: 0.0}
        out: dict[str, float] = {}
        for f in metrics.get("findings", []):
            key = f"findings/{_slug(Path(f['model']).name)}/{_slug(f['claim'])}"
            out[f"{key}/verdict"] = code[f["verdict"]]
            out[f"{key}/n"] = float(f["n"])
            for name, v in (("value", f["value"]), ("ci_low", f["ci"][0]), ("ci_high", f["ci"][1])):
                if v is not None and math.isfinite(v):
                    out[f"{key}/{name}"] = float(v)
        return out


STUDY = register(FindingsStudy())
