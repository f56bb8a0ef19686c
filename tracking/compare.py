"""`factprobe compare`: join runs fact by fact (the CI gate, `factprobe regress`, is tracking/regress.py).

Two runs: the fact-by-fact comparison (accuracy difference with its paired bootstrap interval,
McNemar, eta both ways, per relation). Three or more runs, or two with `--out`, `--cross-model`,
`--model-meta` or `--intersect`: the cross-model maps of Wu et al. 2024 section 4.2
(`factprobe.report.cross_model_maps`): the model x relation heatmap, the Pearson r between models
with its within/across-family means, eta of every within-family smaller/larger pair and of each
fine-tuned model against its base; `--out DIR` writes DIR/cross_model.json, DIR/heatmap.png and
DIR/pearson.png. Family, size and base come from each model's config (`factprobe.report.model_meta`)
or `--model-meta FILE`. Runs on different fact sets are refused naming their data digests, unless
`--intersect`.

Runs are joined on `fact_id` and compared on the boolean per-fact verdict their probe declares,
read with its headline's direction (`factprobe.framework.verdict`: `correct` for the multiple-choice
probes, a plug-in's own column; under a lower-is-better headline a fact is right when its verdict is
False), named by the probe's headline metric (`accuracy`, ...; `not_<column>` for a lower-is-better
one). Probes that declare no verdict (generated answers, coherency rounds, belief templates: several
rows per fact) are refused in one line.

A run reference is a results folder or results.jsonl, an MLflow run id or a tag filter `key=value`
(`factprobe_ops.tracking.run_tables`, which reads it).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

from factprobe.errors import ConfigError, DataError
from factprobe.framework.verdict import FactVerdict, verdict_probes, verdict_table
from factprobe.metrics.comparison import align_templates, check_same_data, compare_runs

from .run_tables import resolve_run, run_provenance


def _eta(res: dict, way: str) -> str:
    """`0.625 mean over 12 relations (wu2024 Table 1), 0.400 pooled over facts`: the relation mean the
    paper reports first, then the pooled rate; the pooled one alone for a result without the mean."""
    pooled = f"{res[f'subsumption_{way}']:.3f} pooled over facts"
    mean = res.get(f"eta_relation_mean_{way}")
    if mean is None:
        return pooled
    n = res.get(f"eta_relations_{way}")
    shown = "n/a" if math.isnan(mean) else f"{mean:.3f}"
    over = f" over {n} relations" if n is not None else " over relations"
    return f"{shown} mean{over} (wu2024 Table 1), {pooled}"


def format_comparison(res: dict, name_a: str, name_b: str, metric: str = "accuracy", metric_b: str | None = None) -> str:
    """The comparison as text. `metric` names run a's compared proportion (its probe's headline
    metric) and `metric_b` run b's (default: the same); the result's keys are `<metric>_a` and
    `<metric_b>_b` (`compare_runs(metric=...)`), or `acc_a` / `acc_b` when it has no such keys."""
    mb = metric_b or metric
    ka, kb = (f"{metric}_a", f"{mb}_b") if f"{metric}_a" in res else ("acc_a", "acc_b")
    title = metric if mb == metric else f"{metric} (A) / {mb} (B)"
    mc = res["mcnemar"]
    lo, hi = res["diff_ci"]
    head_a, head_b = f"{metric} A", f"{mb} B"
    wa, wb = max(9, len(head_a) + 2), max(9, len(head_b) + 2)  # two spaces between headers, whatever the name's length
    pearson = res.get("pearson_per_relation")
    lines = [
        f"A = {name_a}\nB = {name_b}",
        *([f"templates: {res['templates']}"] if res.get("templates") else []),
        *([res["data_note"]] if res.get("data_note") else []),
        *([res["numerics_note"]] if res.get("numerics_note") else []),
        *([res["verdict_note"]] if res.get("verdict_note") else []),
        f"facts joined: {res['n_joined']} (only in A: {res['n_only_a']}, only in B: {res['n_only_b']})",
        f"{title} A {res[ka]:.4f}   B {res[kb]:.4f}   B - A = {res['diff']:+.4f}  95% paired bootstrap CI [{lo:+.4f}, {hi:+.4f}]",
        f"McNemar ({mc['method']}): A-wrong/B-right {mc['b01']}, A-right/B-wrong {mc['b10']}, p = {mc['p_value']:.4g}",
        f"subsumption eta(A|B) = {_eta(res, 'a_given_b')}  (share of A's known facts B also knows)",
        f"subsumption eta(B|A) = {_eta(res, 'b_given_a')}",
        f"Pearson r of per-relation {title}: "
        + (
            f"{pearson:.3f}"
            if pearson is not None and not math.isnan(pearson)
            else "n/a (fewer than two relations, or one run constant over them)"
        ),
        "",
        f"{'relation':<14}{'n':>6}{head_a:>{wa}}{head_b:>{wb}}{'B - A':>9}",
    ]
    for rel, r in sorted(res["per_relation"].items()):
        lines.append(f"{rel:<14}{r['n']:>6}{r[ka]:>{wa}.3f}{r[kb]:>{wb}.3f}{r['diff']:>+9.3f}")
    return "\n".join(lines)


def comparable_probes() -> list[str]:
    """Registered probes whose runs `compare` joins: those declaring a per-fact verdict (plug-ins included)."""
    return verdict_probes()


def compare_needs() -> str:
    """One clause naming what `compare` joins."""
    return (
        f"compare joins runs with one boolean verdict per fact, the multiple-choice runs and any probe declaring "
        f"one ({', '.join(comparable_probes())}), fact by fact on fact_id, one row per fact (or per fact and template)"
    )


def compare_table(df: pd.DataFrame, desc: dict, name: str) -> tuple[pd.DataFrame, FactVerdict]:
    """Run `name`'s per-fact table (`resolve_run`'s `df` and description `desc`) as `compare` joins it:
    its probe's verdict (by its `factprobe.probe` tag or the folder's run_config.json; the multiple-choice
    `correct` when it names no probe) as the right series `correct` (`factprobe.framework.verdict.verdict_table`),
    and that verdict. Raises ConfigError (one line: what the run is and what `compare` joins) when the
    probe declares no verdict, or the table lacks `fact_id`, `relation` or a boolean verdict on every row."""
    ref = desc.get("ref", "?")
    return verdict_table(df, run_probe_name(desc), f"run {name} ({ref})", compare_needs())


def cross_model_wanted(args) -> bool:
    """True when `compare` draws the cross-model maps: three or more runs, or two with `--out`,
    `--cross-model` or `--model-meta` (two runs with `--intersect` alone: the fact-by-fact comparison
    on the facts both test)."""
    return (
        len(args.runs) > 2
        or bool(getattr(args, "out", None))
        or bool(getattr(args, "cross_model", False))
        or bool(getattr(args, "model_meta", None))
    )


def compare_cli(args) -> int:
    """`factprobe compare RUN RUN [RUN ...]`: two runs fact by fact, or the cross-model maps."""
    if len(args.runs) < 2:
        raise ConfigError(f"compare needs at least two runs, got {len(args.runs)}: {' '.join(args.runs)}")
    if cross_model_wanted(args):
        return cross_model_cli(args)
    args.run_a, args.run_b = args.runs
    return compare_two_cli(args)


def _run_model(desc: dict, config: dict | None) -> str:
    """The model a run probed: its configuration's `model`, else its metrics.json `model`, else the
    reference itself (a bare results.jsonl)."""
    if config and config.get("model"):
        return str(config["model"])
    ref = desc.get("ref", "?")
    p = Path(ref)
    try:
        model = json.loads(((p if p.is_dir() else p.parent) / "metrics.json").read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError):
        model = None
    return str(model) if model else ref


def load_run_facts(refs: list[str], tracking_uri: str | None = None) -> tuple[list, str]:
    """The runs `refs` as `RunFacts` (per-fact table with the probe's verdict read as the right series
    `correct`, model, data digest (the identity's where there is one), configuration, probe) and the
    compared metric's name (`FactVerdict.compared`: the probes' headline metric, or `not_<column>` for a
    lower-is-better one). Checked like with like first (`check_runs_alike`)."""
    runs, metric, _ = _load_runs(refs, tracking_uri)
    return runs, metric


def _load_runs(refs: list[str], tracking_uri: str | None = None) -> tuple[list, str, list[dict]]:
    """`load_run_facts`, and the runs' descriptions (`resolve_run`)."""
    from factprobe.report.cross_model_maps import RunFacts

    out, metrics, descs = [], [], []
    for i, ref in enumerate(refs, start=1):
        df, desc = resolve_run(ref, tracking_uri)
        df, verdict = compare_table(df, desc, str(i))
        config, digest = run_provenance(desc)
        probe = run_probe_name(desc, config)
        out.append(RunFacts(model=_run_model(desc, config), table=df, ref=ref, digest=digest, config=config, probe=probe))
        metrics.append(verdict.compared)
        descs.append(desc)
    check_runs_alike(descs, [r.probe for r in out])
    metric = metrics[0] if len(set(metrics)) == 1 else " / ".join(dict.fromkeys(metrics))
    return out, metric, descs


def check_runs_alike(descs: list[dict], probes: list[str | None]) -> None:
    """Like with like for the cross-model maps, before they are aligned: runs whose probes prepare
    different items are refused (`check_same_items_kind`); one warning line names the runs without a
    measurement identity; one line per run whose numerics differ from the first run's. Runs on
    different data are refused by `align_runs` (their digests), with `data_inputs_note` appended."""
    from .identity_check import numerics_difference

    labels = [str(i) for i in range(1, len(descs) + 1)]
    check_same_items_kind({lab: (d.get("ref", "?"), p) for lab, d, p in zip(labels, descs, probes)})
    missing = [(lab, d.get("ref", "?")) for lab, d in zip(labels, descs) if d.get("identity") is None]
    if missing:
        print(identity_warning(missing), file=sys.stderr)
    known = [(lab, d["identity"]) for lab, d in zip(labels, descs) if d.get("identity") is not None]
    for lab, ident in known[1:]:
        num = numerics_difference(known[0][1], ident, (known[0][0], lab))
        if num:
            print(numerics_line((known[0][0], lab), num), file=sys.stderr)


def data_inputs_note(descs: list[dict]) -> str:
    """For runs refused on different data: " (run 1 vs 3: data digest ...; inputs that differ: ...)"
    for every run whose identity's data digest differs from the first identified run's; "" when none can be said."""
    from .identity_check import data_difference

    known = [(str(i), d["identity"]) for i, d in enumerate(descs, start=1) if d.get("identity") is not None]
    parts = [
        f"run {known[0][0]} vs {lab}: {diff}"
        for lab, ident in known[1:]
        if (diff := data_difference(known[0][1], ident, (known[0][0], lab)))
    ]
    return f" ({'; '.join(parts)})" if parts else ""


def cross_model_cli(args) -> int:
    """The cross-model maps of `args.runs` (see the module docstring): printed, and written to
    `args.out` (cross_model.json, heatmap.png, pearson.png) when given."""
    import matplotlib.pyplot as plt

    from factprobe.io import atomic_write_json
    from factprobe.report.cross_model_maps import align_runs, build_maps, format_maps, maps_figures
    from factprobe.report.model_meta import resolve_model_meta

    if getattr(args, "model_meta", None) and not Path(args.model_meta).is_file():
        raise ConfigError(f"--model-meta {args.model_meta}: no such file")
    runs, metric, descs = _load_runs(list(args.runs), args.tracking_uri)
    try:
        aligned = align_runs(
            runs, intersect=bool(getattr(args, "intersect", False)), templates=getattr(args, "templates", "majority")
        )
    except DataError as e:
        raise DataError(f"{e}{data_inputs_note(descs)}") from None
    metas = resolve_model_meta([r.model for r in runs], getattr(args, "model_meta", None))
    maps = build_maps(aligned, metas, metric)
    written = []
    if getattr(args, "out", None):
        from factprobe.run_folder import claim

        with claim(args.out, "compare") as out:  # a folder of another kind (a probe's, a study's) is refused
            atomic_write_json(out / "cross_model.json", maps.result)
            try:
                for stem, fig in maps_figures(maps, metric).items():
                    fig.savefig(out / f"{stem}.png", dpi=110)
            finally:
                plt.close("all")
        written = [str(out / n) for n in ("cross_model.json", "heatmap.png", "pearson.png")]
    if args.json:
        print(json.dumps(maps.result, indent=2, allow_nan=False))
    else:
        print(format_maps(maps.result))
        if written:
            print("\nwrote " + ", ".join(written))
    return 0


def run_probe_name(desc: dict, config: dict | None = None) -> str | None:
    """The probe of a resolved run: its `factprobe.probe` tag, its folder's run_config.json, or `config`'s."""
    from .baseline import run_probe

    return run_probe(desc) or (config or {}).get("probe")


def check_same_items_kind(probes: dict[str, tuple[str, str | None]]) -> None:
    """Refuse (ConfigError, one line) runs whose probes prepare different kinds of items (their
    registered `dataset` differs, e.g. your own items file against items built from facts): no fact
    of one is tested by the other. `probes` maps a run's label to (its reference, its probe or None);
    runs of unknown or unregistered probes are not judged. The line says which runs can be compared
    with each: those of probes preparing the same kind of items."""
    from factprobe.framework.registry import load_probes

    registry = load_probes()
    known = {lab: (ref, registry[p]) for lab, (ref, p) in probes.items() if p in registry}
    kinds = {spec.dataset for _, spec in known.values()}
    if len(kinds) < 2:
        return
    first, *rest = known.items()
    lab_b, (ref_b, spec_b) = next(((lab, v) for lab, v in rest if v[1].dataset != first[1][1].dataset))
    lab_a, (ref_a, spec_a) = first

    def peers(spec) -> str:
        return ", ".join(n for n, p in registry.items() if p.dataset == spec.dataset and p.fact_verdict)

    def what(spec) -> str:
        return spec.description.split(":")[0].split(" (")[0].strip()

    raise ConfigError(
        f"run {lab_a} ({ref_a}) is a run of {spec_a.name} ({what(spec_a)}) and run {lab_b} ({ref_b}) one of "
        f"{spec_b.name} ({what(spec_b)}): the two probes prepare different items, so no fact of one is "
        f"tested by the other; compare {spec_a.name} runs only with runs of {peers(spec_a)}, and "
        f"{spec_b.name} runs only with runs of {peers(spec_b)}, on the same data"
    )


def identity_warning(missing: list[tuple[str, str]]) -> str:
    """The one warning line for runs (label, reference) that carry no measurement identity."""
    from .identity_check import MISSING

    runs = ", ".join(f"{lab} ({ref})" for lab, ref in missing)
    verb = MISSING if len(missing) == 1 else MISSING.replace("records", "record", 1).replace("it was", "they were", 1)
    return f"warning: run{'s' if len(missing) > 1 else ''} {runs} {verb}: data and numerics are not checked"


def numerics_line(labels: tuple[str, str], difference: str) -> str:
    """The one line `compare` prints for two runs of different numerics."""
    return (
        f"note: runs {labels[0]} and {labels[1]} ran with different numerics ({difference}): part of any "
        f"difference may come from the numerics, not the models"
    )


def check_like_with_like(
    desc_a: dict, desc_b: dict, probe_a: str | None, probe_b: str | None, intersect: bool, labels: tuple[str, str] = ("a", "b")
) -> tuple[str, str]:
    """What the two runs' identities say before they are joined: (a note on data for --intersect,
    the numerics line), each "" when there is nothing to say. Prints one warning line when a run has
    no identity. Raises DataError (one line naming the digests and the inputs that differ) for runs
    of one probe made on different data, unless `intersect` (runs of different probes prepare
    different items from the same facts, so their digests always differ and are not compared)."""
    from .identity_check import data_difference, numerics_difference

    ia, ib = desc_a.get("identity"), desc_b.get("identity")
    missing = [(lab, d.get("ref", "?")) for lab, d, i in ((labels[0], desc_a, ia), (labels[1], desc_b, ib)) if i is None]
    if missing:
        print(identity_warning(missing), file=sys.stderr)
    if ia is None or ib is None:
        return "", ""
    data_note = ""
    if probe_a == probe_b or None in (probe_a, probe_b):
        diff = data_difference(ia, ib, labels)
        if diff and not intersect:
            raise DataError(
                f"the runs were made on different data: {diff}; rerun one on the other's inputs, or pass "
                f"--intersect to compare the facts whose items both runs share"
            )
        if diff:
            data_note = f"note: --intersect: the runs were made on different data ({diff})"
    num = numerics_difference(ia, ib, labels)
    return data_note, numerics_line(labels, num) if num else ""


def _shared_items(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """With both tables carrying each row's item content digest (`item_digest`): the rows whose fact
    both runs tested with the same item (prompt, options, answer), and how many shared facts were
    dropped because their items differ; the tables unchanged otherwise."""
    if "item_digest" not in a.columns or "item_digest" not in b.columns:
        return a, b, 0
    ours = a.groupby("fact_id")["item_digest"].agg(lambda s: tuple(sorted(map(str, s))))
    theirs = b.groupby("fact_id")["item_digest"].agg(lambda s: tuple(sorted(map(str, s))))
    shared = ours.index.intersection(theirs.index)
    differ = set(shared[(ours[shared] != theirs[shared]).to_numpy()])
    if not differ:
        return a, b, 0
    return a[~a["fact_id"].isin(differ)], b[~b["fact_id"].isin(differ)], len(differ)


def check_same_facts(a: pd.DataFrame, b: pd.DataFrame, intersect: bool, names: tuple[str, str] = ("a", "b")) -> str:
    """ "" when the two per-fact tables (joinable on `fact_id`) hold the same facts; else, with
    `intersect`, a note on the subset compared, and without it DataError (one line: how many facts
    each run has that the other lacks, one example each, and --intersect)."""
    fa, fb = set(a["fact_id"]), set(b["fact_id"])
    only_a, only_b = sorted(map(str, fa - fb)), sorted(map(str, fb - fa))
    if not only_a and not only_b:
        return ""
    shared = len(fa & fb)
    parts = [f"{len(x)} fact(s) only in run {n} (e.g. {x[0]})" for n, x in zip(names, (only_a, only_b)) if x]
    if not intersect:
        raise DataError(
            f"the runs test different facts: {', '.join(parts)}; rerun them on the same data, or pass "
            f"--intersect to compare the {shared} facts both test"
        )
    return f"note: --intersect: compared on the {shared} facts both runs test ({', '.join(parts)})"


def compare_two_cli(args) -> int:
    """Two runs (`args.run_a`, `args.run_b`) fact by fact: refused when they test different facts or
    different data (unless `--intersect`), or prepare different kinds of items; a run without a
    measurement identity is warned about in one line, runs of different numerics noted in one line."""
    from factprobe.metrics.json_safe import json_safe

    intersect = bool(getattr(args, "intersect", False))
    a, desc_a = resolve_run(args.run_a, args.tracking_uri)
    b, desc_b = resolve_run(args.run_b, args.tracking_uri)
    a, va = compare_table(a, desc_a, "a")
    b, vb = compare_table(b, desc_b, "b")
    ma, mb = va.compared, vb.compared
    metric = ma if ma == mb else f"{ma} (A) / {mb} (B)"
    (config_a, digest_a), (config_b, digest_b) = run_provenance(desc_a), run_provenance(desc_b)
    probe_a, probe_b = run_probe_name(desc_a, config_a), run_probe_name(desc_b, config_b)
    check_same_items_kind({"a": (args.run_a, probe_a), "b": (args.run_b, probe_b)})
    if desc_a.get("identity") and desc_b.get("identity") and digest_a != digest_b:
        digest_a = digest_b = None  # the identities' digests are compared below, naming the inputs (and not across probes)
    try:
        data_note = check_same_data(config_a, config_b, digest_a, digest_b)
    except DataError as e:
        raise DataError(f"{e} (a = {args.run_a}, b = {args.run_b})") from None
    if data_note and not intersect:
        raise DataError(
            f"{data_note.removeprefix('note: ').split('; only')[0]}; pass --intersect to compare the "
            f"relations both ran (a = {args.run_a}, b = {args.run_b})"
        )
    identity_note, numerics_note = check_like_with_like(desc_a, desc_b, probe_a, probe_b, intersect)
    a, b, note = align_templates(a, b, getattr(args, "templates", "majority"))
    dropped = ""
    if intersect and probe_a == probe_b:  # runs of other probes test other items by design
        a, b, n_other = _shared_items(a, b)
        if n_other:
            dropped = f"note: --intersect: {n_other} shared fact(s) left out: their items (prompt, options or answer) differ"
    facts_note = check_same_facts(a, b, intersect)
    notes = [n for n in (data_note, identity_note, dropped, facts_note) if n]
    for line in [*notes, *([numerics_note] if numerics_note else [])]:
        print(line, file=sys.stderr)
    res = compare_runs(a, b, n_boot=args.n_boot, metric=(ma, mb))
    res["metric"] = metric
    if note:
        res["templates"] = note
    if notes:
        res["data_note"] = "; ".join(n.removeprefix("note: ") for n in notes)
    if numerics_note:
        res["numerics_note"] = numerics_note
    directions = [v.note() for v in dict.fromkeys((va, vb)) if v.note()]
    if directions:
        res["verdict_note"] = "; ".join(directions)
    if args.json:
        print(json.dumps(json_safe(res), indent=2, allow_nan=False))
    else:
        print(format_comparison(res, args.run_a, args.run_b, ma, mb))
    return 0
