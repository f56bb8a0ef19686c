"""Counterfactual ICL with known and unknown knowledge (yuan2024 sections 4.1-4.2, Figures 6-7).

Phases, scored in this order (each a group of the generic runner, so a run resumes anywhere):

1. `pool`: regular k0-shot QA (k0 = `--known-shots`, default 10, the regular block of the `qa`
   probe) over the train split (the block's own items get a second block, `pool-alt`, so no
   question sees its own answer): which exemplar candidates the model knows (EM = 1) and which it
   does not. Skipped with `--known-unknown PATH`, which reuses a table made earlier (by `qa
   --split all` or this probe) for the same model: a table of another model, or of other weights
   under the same model name (its `model_revision` differs from the loaded model's), is refused.
2. `regular@k0` and `counterfactual@k0` over the evaluation split (section 4.1): the same random
   block, with true answers and with answers shuffled within each relation.
3. For every k of `--shots` (default 10,15,20,32): `known-unshuffle`, `known-shuffle`,
   `unknown-unshuffle`, `unknown-shuffle` (Figure 7), over the evaluation split. The exemplars are
   drawn from the model's own known / unknown train facts; the k-blocks of one setting are
   prefixes of one draw. When fewer known (unknown) facts exist than k, k is capped and a note
   says so; `--strict` refuses instead. `--exemplar-draws N` (default 1) asks every question with N
   independent draws of each setting's exemplars (and of their shuffled answers): groups
   `<setting>@<k>` (draw 0, the draw of earlier versions) and `<setting>@<k>:draw<j>`, rows tagged
   `draw`. The findings' counterfactual interval covers the draw (`factprobe.metrics.findings_counterfactual`);
   N decides results, so it is part of the run's config key.

Shuffling (`factprobe.datasets.counterfactual.shuffle_answers`): an exemplar's answer becomes the
answer of another training fact of the same relation, never its own and never another correct
answer of its subject. `--counterfactual-answer fact` (default; yuan2024 4.1: "random answers
chosen from the 5k training set" within the property type) draws a random admissible training
fact and shows its answer, so frequent objects are drawn more often; `label` draws uniformly over
the distinct admissible answers (the behaviour before issue 20, kept as a deviation). Either way
the answer is never its own (by the QA metrics' exact match against its golds, and by object id over
the run's test and training facts); a relation with no such answer stays unshuffled, which each row's
`exemplars` records (`{fact_id, question, shown_answer, true_answer, shuffled}`).

A row carries `setting`, `shots` (exemplars actually used) and `shots_asked`. A k capped by a small
known/unknown pool (or the model's window) is labelled with the k USED: `settings` is keyed
`<setting>@<k used>` (each entry keeps `shots_asked`; MLflow logs `em/<setting>/k<k used>`),
`figure7` rows carry both `shots` (asked) and `shots_used`, and `shots_capped` / `shots_note` list
the capped groups. A setting's EM pools its draws; `draws` and, with more than one, `em_by_draw`
(and `shots_used_by_draw` when the draws' blocks fit differently) say what was pooled. `metrics.json` holds EM/F1/Contains
per setting and k (`settings`), the Figure-7 table (`figure7`: EM by setting and k) and
`regular`/`counterfactual` 10-shot summaries. `known_unknown.parquet` is written (or, on reuse,
copied through) for the fine-tuning pipeline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import option
from ..datasets.counterfactual import DRAWS, Exemplar, correct_object_keys, draw_exemplars, shuffle_answers
from ..datasets.prepared import Prepared
from ..datasets.qa import qa_info_summary, qa_train_items
from ..errors import ConfigError
from ..framework.base import Probe, Session
from ..framework.config import RunConfig
from ..framework.registry import get_probe, register
from ..framework.reporting import Headline, MapVerdict, ReportPart, ReportRun, model_label
from .qa import (
    ANSWER_COLUMNS,
    BATCH,
    QA_METRIC_COLUMNS,
    BlockState,
    QAConfig,
    QAProbe,
    QATask,
    fit_block,
    generate_rows,
    pool_items,
    qa_summary,
    regular_block,
    regular_groups,
)

FIGURE7_SETTINGS = ("known-unshuffle", "known-shuffle", "unknown-unshuffle", "unknown-shuffle")
DRAW_SEP = ":draw"
#: the most exemplar draws a run may ask for (the findings' paper budget uses 5; every draw asks every question)
MAX_EXEMPLAR_DRAWS = 100


@dataclass(frozen=True)
class DrawTask(QATask):
    """A Figure-7 question asked with exemplar draw `draw` (draw 0 keeps the key of earlier versions)."""

    draw: int = 0

    @property
    def key(self) -> str:
        return super().key + (f"#d{self.draw}" if self.draw else "")


def figure7_group(setting: str, k: int, draw: int) -> str:
    """The group name of one Figure-7 setting, k and exemplar draw."""
    return f"{setting}@{k}" + (f"{DRAW_SEP}{draw}" if draw else "")


def parse_group(group: str) -> tuple[str, int, int]:
    """(setting, k, draw) of a group name (`figure7_group`, or `<setting>@<k>` of the other phases)."""
    head, _, draw = group.partition(DRAW_SEP)
    setting, _, k = head.partition("@")
    return setting, int(k), int(draw or 0)


@dataclass
class CounterfactualConfig(QAConfig):
    """Counterfactual ICL's own fields (`shots` defaults to Figure 7's k)."""

    known_shots: int = option(
        10, "k of the regular block that decides known/unknown, and of the regular and counterfactual settings of section 4.1"
    )
    known_unknown: str | None = option(
        None,
        "reuse this known/unknown table (a known_unknown.parquet, its folder, or "
        "runs:/<MLflow run id> of the run that logged it; made by `qa --split all` "
        "for the same model) instead of asking the pool",
    )
    strict: bool = option(False, "refuse when a setting has fewer known/unknown facts than k (default: cap k and say so)")
    counterfactual_answer: str = option(
        "fact",
        "how a shuffled exemplar's answer is drawn from its relation's training facts: fact (a random "
        "training fact's answer, so frequent objects come up more often: yuan2024's) or label (uniform over "
        "the distinct answers: factprobe's before issue 20)",
        choices=DRAWS,
    )

    exemplar_draws: int = option(
        1,
        "independent draws of each Figure-7 setting's exemplars (and shuffled answers); every question is asked "
        "with each, rows carry `draw` (the findings' interval covers the draw: use >= 2 there)",
    )

    DEFAULT_SHOTS = (10, 15, 20, 32)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(self.known_shots >= 1, "known_shots", self.known_shots, "must be >= 1")
        self.check(all(k >= 1 for k in self.shots), "shots", self.shots, "counterfactual settings need k >= 1")
        self.check(
            isinstance(self.exemplar_draws, int)
            and not isinstance(self.exemplar_draws, bool)
            and 1 <= self.exemplar_draws <= MAX_EXEMPLAR_DRAWS,
            "exemplar_draws",
            self.exemplar_draws,
            f"must be an integer from 1 to {MAX_EXEMPLAR_DRAWS} (each draw asks every question again)",
        )


class CounterfactualProbe(Probe):
    name = "counterfactual"
    description = "counterfactual ICL (yuan2024): regular vs shuffled exemplars, from the model's known vs unknown facts"
    config_class = CounterfactualConfig
    dataset = "qa"
    batch_size = BATCH
    headline_metric = Headline("em", "em")
    headline_keys = ("em", "f1", "contains")
    per_fact_columns = ANSWER_COLUMNS
    metric_columns = (*QA_METRIC_COLUMNS, "setting", "exemplars", "draw")  # a block's exemplars: one list shared by its rows
    relation_metric = "em"
    relation_metric_title = "EM"
    #: the knowledge map: the regular k0-shot answer on the eval split, an exact match (the qa probe's verdict)
    map_verdict = MapVerdict(("correct",), "majority", (("split", "eval"), ("setting", "regular")))

    # ---- reporting (factprobe.probes.qa_reporting)
    def headline(self, metrics):
        """The default line plus what it is: the regular exemplars at the known/unknown k."""
        head = super().headline(metrics)
        used = (metrics.get("regular") or {}).get("shots_used")
        return f"{head} (regular exemplars, k={used})" if head and used is not None else head

    def relation_text(self, metrics):
        """The Figure-7 table (EM per setting and k), printed after a CLI run."""
        from .qa_reporting import figure7_text

        return figure7_text(metrics)

    def flat_metrics(self, metrics):
        """The default flat metrics plus `em/<setting>/k<k>` (also f1, contains) of every setting, and
        the 95% intervals (`em_ci_low`, `em_ci_low/<setting>/k<k>`, ...)."""
        from .qa_reporting import ci_flat, settings_metrics

        return {**super().flat_metrics(metrics), **ci_flat(metrics), **settings_metrics(metrics)}

    def stepped_metrics(self, metrics):
        """EM against k per setting (`em_by_k/<setting>`): the MLflow UI's Figure 7 of one run."""
        from .qa_reporting import em_by_k

        return em_by_k(metrics)

    def run_figures(self, metrics, model: str):
        """Figure 7 of this model (`figure7_em_vs_k`); without Figure-7 rows, EM per relation."""
        if not metrics.get("figure7"):
            return super().run_figures(metrics, model)
        from ..report.plots import figure7

        label = model_label(model)
        return {"figure7_em_vs_k": figure7({label: dict(metrics)}, title=f"{self.name}: EM against k ({label})")}

    def report(self, runs: Sequence[ReportRun], everything: Sequence[ReportRun]) -> ReportPart:
        """Figures 7 and 6 across models with the zero-shot EM of the QA runs of the same models."""
        from .qa_reporting import counterfactual_report

        return counterfactual_report(runs, everything, lambda r: isinstance(get_probe(r.probe), QAProbe))

    def prepare(self, cfg: RunConfig) -> Prepared:
        from ..datasets.qa import prepare_qa

        p = cfg.params
        return prepare_qa(cfg.base, max_train_per_relation=p.qa_train_per_relation, templates_path=p.qa_templates)

    def validate(self, cfg: RunConfig, prepared: Prepared) -> None:
        if cfg.params.known_unknown:
            self._reused(cfg, prepared)  # a missing or foreign table is refused before the model loads

    # ------------------------------------------------------------------ groups and keys
    def groups(self, cfg: RunConfig, prepared: Prepared) -> dict[str, list[QATask]]:
        p = cfg.params
        evals = [it for its in prepared.items.values() for it in its]
        out: dict[str, list[QATask]] = {}
        if not p.known_unknown:
            out.update(regular_groups(prepared, pool_items(prepared), p.known_shots, cfg.base.seed, name="pool"))
        out[f"regular@{p.known_shots}"] = [QATask(it, "regular", p.known_shots) for it in evals]
        out[f"counterfactual@{p.known_shots}"] = [QATask(it, "counterfactual", p.known_shots) for it in evals]
        for draw in range(p.exemplar_draws):
            for k in p.shots:
                for s in FIGURE7_SETTINGS:
                    out[figure7_group(s, k, draw)] = [DrawTask(it, s, k, draw) for it in evals]
        return out

    def item_keys(self, cfg, prepared, item: QATask) -> list[str]:
        return [item.key]

    # ------------------------------------------------------------------ known / unknown
    def _reused(self, cfg: RunConfig, prepared: Prepared) -> dict[str, bool]:
        from ..datasets.known_unknown import read_known_unknown

        df = read_known_unknown(cfg.params.known_unknown, cfg.base.model, shots=cfg.params.known_shots)
        train = df[df["split"] == "train"]
        pool_ids = {it.fact_id for it in pool_items(prepared)}
        hit = train[train["fact_id"].isin(pool_ids)]
        if hit.empty:
            raise ConfigError(
                f"{cfg.params.known_unknown}: the known/unknown table covers none of this run's "
                f"{len(pool_ids)} train-split facts (was it made with the same data, seed and "
                f"--qa-train-per-relation, and --split all?)"
            )
        return dict(zip(hit["fact_id"], hit["known"].astype(bool)))

    def check_model(self, cfg: RunConfig, prepared: Prepared, loaded: Any) -> None:
        """Refuse a reused table made with other weights under the same model name (before the run
        writes anything, so a rerun with another table into the same folder is not refused)."""
        if not cfg.params.known_unknown:
            return
        from ..datasets.known_unknown import read_known_unknown

        df = read_known_unknown(cfg.params.known_unknown, cfg.base.model)
        loaded = getattr(loaded, "revision", "") or ""
        theirs = sorted({str(r) for r in df["model_revision"] if str(r)} - {loaded}) if loaded else []
        if theirs:
            raise ConfigError(
                f"{cfg.params.known_unknown}: the known/unknown table was made with revision "
                f"{', '.join(theirs)} of {cfg.base.model}, but the loaded weights are {loaded}; "
                "make a new table for these weights"
            )

    def _known(self, session: Session) -> dict[str, bool]:
        cfg = session.cfg
        if cfg.params.known_unknown:
            return self._reused(cfg, session.prepared)
        out = {}
        for r in session.done.values():
            if r["split"] == "train" and r["setting"] == "regular" and r["shots_asked"] == cfg.params.known_shots:
                out[r["fact_id"]] = r["em"] >= 1.0
        return out

    @staticmethod
    def _correct_objects(prepared: Prepared) -> dict:
        """Every correct object id of each subject over the run's test and training facts."""
        facts = [*prepared.facts.get("test", ()), *prepared.facts.get("train", ())]
        return correct_object_keys(facts)

    # ------------------------------------------------------------------ blocks
    def open_relation(self, session: Session, group: str) -> BlockState:
        cfg, p = session.cfg, session.cfg.params
        setting, k, draw = parse_group(group)
        tag = f"#draw{draw}" if draw else ""  # draw 0: the draw (and shuffle) of earlier versions
        pool = pool_items(session.prepared)
        by_rel = qa_train_items(session.prepared)
        questions = [t.item.question for t in self.groups(cfg, session.prepared)[group]]
        correct = self._correct_objects(session.prepared)
        if setting in ("pool", "pool-alt", "regular", "counterfactual"):
            drawn = regular_block(session.prepared, k, cfg.base.seed, alt=setting == "pool-alt")
            ex = (
                shuffle_answers(drawn, by_rel, cfg.base.seed, correct_objects=correct, draw=cfg.params.counterfactual_answer)
                if setting == "counterfactual"
                else [Exemplar.of(it) for it in drawn]
            )
        else:
            want_known = setting.startswith("known")
            known = self._known(session)
            candidates = [it for it in pool if it.fact_id in known and known[it.fact_id] == want_known]
            kind = "known" if want_known else "unknown"
            if len(candidates) < k:
                msg = f"{group}: the model has {len(candidates)} {kind} train facts for k={k} (of {len(known)} classified)"
                if p.strict:
                    raise ConfigError(msg + "; --strict refuses (lower --shots or raise --qa-train-per-relation)")
                session.note(msg + f"; k capped at {len(candidates)}")
            drawn = draw_exemplars(candidates, k, cfg.base.seed, kind + tag)
            ex = (
                shuffle_answers(
                    drawn, by_rel, cfg.base.seed, "shuffle" + tag, correct_objects=correct, draw=cfg.params.counterfactual_answer
                )
                if setting.endswith("-shuffle")
                else [Exemplar.of(it) for it in drawn]
            )
        unshuffled = [e.fact_id for e in ex if not e.shuffled]
        if setting in ("counterfactual", "known-shuffle", "unknown-shuffle") and unshuffled:
            session.note(
                f"{group}: {len(unshuffled)} exemplar(s) kept their true answer (no other answer in "
                f"their relation): {', '.join(unshuffled[:5])}"
            )
        return fit_block(session, group, ex, questions)

    def score_batch(self, session: Session, state: BlockState, batch: Sequence[QATask]) -> list[dict]:
        rows = generate_rows(session, state, batch, self.name)
        for r, t in zip(rows, batch):
            r["draw"] = getattr(t, "draw", 0)
        return rows

    # ------------------------------------------------------------------ outputs
    def metrics(self, rows, prepared: Prepared, cfg: RunConfig) -> dict:
        p = cfg.params
        evals = [r for r in rows if r["split"] == "eval"]
        settings: dict[str, dict] = {}
        for r in evals:
            settings.setdefault(f"{r['setting']}@{r['shots_asked']}", []).append(r)  # type: ignore[arg-type]
        summary = {g: qa_summary(rs) for g, rs in settings.items()}
        for g, rs in settings.items():
            summary[g]["shots_used"] = rs[0]["shots"]
            summary[g]["shuffled_exemplars"] = sum(e["shuffled"] for e in rs[0]["exemplars"])
            summary[g].update(self._draws(rs))
        figure7 = [
            {
                "setting": s,
                "shots": k,
                "shots_used": summary.get(f"{s}@{k}", {}).get("shots_used"),
                "em": summary.get(f"{s}@{k}", {}).get("em"),
                "f1": summary.get(f"{s}@{k}", {}).get("f1"),
                "contains": summary.get(f"{s}@{k}", {}).get("contains"),
                **{f"{c}_ci": summary.get(f"{s}@{k}", {}).get(f"{c}_ci") for c in ("em", "f1", "contains")},
                "n": summary.get(f"{s}@{k}", {}).get("n"),
                **{x: summary.get(f"{s}@{k}", {}).get(x) for x in ("draws", "em_by_draw") if x in summary.get(f"{s}@{k}", {})},
            }
            for s in FIGURE7_SETTINGS
            for k in p.shots
        ]
        pool = [r for r in rows if r["split"] == "train"]
        if p.known_unknown:  # no pool phase: count the reused table's classification of the pool
            known = list(self._reused(cfg, prepared).values())
        else:
            known = [r["em"] >= 1.0 for r in pool if r["setting"] == "regular" and r["shots_asked"] == p.known_shots]
        labelled, capped = self._labelled(summary)
        m: dict[str, Any] = {
            "settings": labelled,
            "figure7": figure7,
            "regular": summary.get(f"regular@{p.known_shots}"),
            "counterfactual": summary.get(f"counterfactual@{p.known_shots}"),
            "n_known_train": sum(known),
            "n_unknown_train": len(known) - sum(known),
            "known_unknown_reused": p.known_unknown or None,
            "shots": p.shots,
            "dropped_relations": dict(prepared.dropped),
        }
        reg = m["regular"] or {}
        m.update(
            em=reg.get("em"),
            f1=reg.get("f1"),
            contains=reg.get("contains"),
            em_ci=reg.get("em_ci"),
            f1_ci=reg.get("f1_ci"),
            contains_ci=reg.get("contains_ci"),
            n=reg.get("n", 0),
            per_relation=reg.get("per_relation", {}),
        )
        m.update(qa_info_summary(prepared))
        if capped:
            m["shots_capped"] = capped
            m["shots_note"] = "; ".join(f"{g}: only {k} exemplar(s) used, labelled {k}" for g, k in capped.items())
        return m

    @staticmethod
    def _draws(rows: Sequence[dict]) -> dict[str, Any]:
        """`draws` (exemplar draws pooled in a setting's rows) and, with more than one, `em_by_draw`
        and (when their blocks fit differently) `shots_used_by_draw`."""
        by: dict[int, list[dict]] = {}
        for r in rows:
            by.setdefault(int(r.get("draw") or 0), []).append(r)
        out: dict[str, Any] = {"draws": len(by)}
        if len(by) > 1:
            out["em_by_draw"] = [sum(float(r["em"]) for r in by[d]) / len(by[d]) for d in sorted(by)]
            out.update(CounterfactualProbe._crossed_intervals(by))
            used = [by[d][0]["shots"] for d in sorted(by)]
            if len(set(used)) > 1:
                out["shots_used_by_draw"] = used
        return out

    @staticmethod
    def _crossed_intervals(by: Mapping[int, Sequence[dict]]) -> dict[str, Any]:
        """With several exemplar draws a setting's rows are questions x draws, not independent items: the
        95% intervals of EM, F1 and Contains (replacing `summarize_qa`'s bootstrap over rows, which treats
        them as independent and is too narrow) are the crossed t-interval of the findings
        (`findings_counterfactual.crossed_t_interval`: draws and questions both sources of chance), over the
        questions asked in every draw, clipped to [0, 1]; `ci_method` says so."""
        from ..metrics.findings_counterfactual import crossed_t_interval

        facts = sorted(set.intersection(*({str(r["fact_id"]) for r in rs} for rs in by.values())))
        out: dict[str, Any] = {"ci_method": "crossed t-interval over exemplar draws x questions"}
        for c in ("em", "f1", "contains"):
            cell = {d: {str(r["fact_id"]): float(r[c]) for r in rs} for d, rs in by.items()}
            table = [[cell[d][f] for f in facts] for d in sorted(by)]
            _, lo, hi, _ = crossed_t_interval(table)
            out[f"{c}_ci"] = None if math.isnan(lo) else [max(0.0, lo), min(1.0, hi)]
        return out

    @staticmethod
    def _labelled(summary: dict[str, dict]) -> tuple[dict[str, dict], dict[str, int]]:
        """`settings` keyed `<setting>@<k used>` (each entry keeps `shots_asked`), and {`<setting>@<k
        asked>`: k used} for the capped ones. When two asked k of a setting are capped to the same k,
        the second keeps its asked key (`<setting>@<k asked>`) and stays in `shots_capped`."""
        out: dict[str, dict] = {}
        capped: dict[str, int] = {}
        for group, entry in summary.items():
            setting, _, k = group.rpartition("@")
            used = entry.get("shots_used")
            key = group if used is None or str(used) == k else f"{setting}@{used}"
            if key in out:
                key = group
            if used is not None and str(used) != k:
                capped[group] = int(used)
            out[key] = {**entry, "shots_asked": int(k)}
        return out, capped

    def artifacts(self, rows, prepared, cfg: RunConfig, metrics: dict) -> dict[str, Any]:
        from ..datasets.known_unknown import FILE_NAME, known_unknown_table, read_known_unknown

        picked = [r for r in rows if r["setting"] == "regular" and r["shots_asked"] == cfg.params.known_shots]
        table = known_unknown_table(picked, cfg.base.model, metrics.get("model_revision", ""))
        if cfg.params.known_unknown:  # keep the reused train rows: the fine-tuning sets draw from them
            import pandas as pd

            old = read_known_unknown(cfg.params.known_unknown, cfg.base.model)
            table = pd.concat([old[old["split"] == "train"], table], ignore_index=True)
        return {FILE_NAME: table}


register(CounterfactualProbe())
