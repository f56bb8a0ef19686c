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

Runs are joined on `fact_id` and compared on the boolean per-fact verdict their probe declares
(`Probe.fact_verdict`: `correct` for the multiple-choice probes, a plug-in's own column), named by
the probe's headline metric (`accuracy`, ...). Probes that declare no verdict (generated answers,
coherency rounds, belief templates: several rows per fact) are refused in one line.

A run reference is any of:
- a results folder or a `results.jsonl` file written by `factprobe probe`;
- an MLflow run id (its `tables/per_fact.parquet` artifact is downloaded);
- a tag filter `key=value` (e.g. `factprobe.trigger=nightly`, or `baseline=true`): the latest
  FINISHED run in any factprobe experiment carrying that tag.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

from factprobe.errors import ConfigError, DataError
from factprobe.metrics.comparison import align_templates, check_same_data, compare_runs

from .baseline import PROBE_TAG
from .clients import TrackingError, tag_filter, tags_match
from .conventions import default_tracking_uri, tag
from .probe_logging import CONFIG_PARAM


def _client(uri: str | None):
    from .library_client import open_mlflow_client

    uri = uri or default_tracking_uri()
    return open_mlflow_client(uri), uri


def _from_results_file(path: Path) -> pd.DataFrame:
    f = path / "results.jsonl" if path.is_dir() else path
    if not f.exists():
        raise DataError(f"{f}: no results.jsonl here")
    return pd.read_json(f, lines=True)


def resolve_run(ref: str, tracking_uri: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Per-fact table and a description dict (`{"ref", "run_id"?, "params"?}`) for a run reference."""
    p = Path(ref)
    if p.exists():
        return _from_results_file(p), {"ref": ref}
    client, uri = _client(tracking_uri)
    run_id = ref
    if "=" in ref:
        from .run import _describe

        key, value = ref.split("=", 1)
        wanted = {key: value}  # user text: quotes, spaces, non-ASCII are all fine (tag_filter)
        try:
            exps = [e.experiment_id for e in client.search_experiments() if e.name.startswith("factprobe/")]
            runs = client.search_runs(exps, filter_string=tag_filter(wanted, "FINISHED"),
                                      order_by=["attributes.start_time DESC"], max_results=50) if exps else []
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - unreachable server, rejected credentials, ...
            raise TrackingError(f"MLflow tracking at {uri}: searching runs tagged {key}={value} failed: {_describe(e)}") from None
        runs = [r for r in runs if _verdict(_probe(r.data.tags.get(PROBE_TAG))) and tags_match(r.data.tags, wanted)]
        if not runs:
            raise ConfigError(f"no finished probe run tagged {key}={value} at {uri}")
        run_id = runs[0].info.run_id
    try:
        run = client.get_run(run_id)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"{ref!r} is neither a results folder nor a run at {uri} ({str(e).splitlines()[0][:120]})") from None
    with tempfile.TemporaryDirectory() as d:
        try:
            local = client.download_artifacts(run_id, "tables/per_fact.parquet", d)
        except Exception as e:  # noqa: BLE001
            raise DataError(f"run {run_id} has no tables/per_fact.parquet artifact ({str(e).splitlines()[0][:120]})") from None
        df = pd.read_parquet(local)
    return df, {"ref": ref, "run_id": run_id, "params": dict(run.data.params), "tags": dict(run.data.tags)}


def run_provenance(desc: dict) -> tuple[dict | None, str | None]:
    """The flat configuration and the test-data digest of a resolved run (`resolve_run`'s `desc`):
    a folder's run_config.json and metrics.json `data_digest`, or an MLflow run's `config_json`
    parameter and `factprobe.dataset_digest` tag. None for what the run does not carry (a bare
    results.jsonl, a run logged without them)."""
    if "run_id" in desc:
        raw = (desc.get("params") or {}).get(CONFIG_PARAM)
        try:
            config = json.loads(raw) if raw else None
        except ValueError:
            config = None
        return (config if isinstance(config, dict) else None), (desc.get("tags") or {}).get(tag("dataset_digest")) or None
    p = Path(desc.get("ref", ""))
    folder = p if p.is_dir() else p.parent
    config = digest = None
    try:
        config = json.loads((folder / "run_config.json").read_text(encoding="utf-8"))["config"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        digest = json.loads((folder / "metrics.json").read_text(encoding="utf-8")).get("data_digest")
    except (OSError, ValueError, AttributeError):
        pass
    return (config if isinstance(config, dict) else None), digest or None


def format_comparison(res: dict, name_a: str, name_b: str, metric: str = "accuracy") -> str:
    """The comparison as text; `metric` names the compared proportion (the probes' headline metric)."""
    mc = res["mcnemar"]
    lo, hi = res["diff_ci"]
    short = metric
    lines = [
        f"A = {name_a}\nB = {name_b}",
        *([f"templates: {res['templates']}"] if res.get("templates") else []),
        *([res["data_note"]] if res.get("data_note") else []),
        f"facts joined: {res['n_joined']} (only in A: {res['n_only_a']}, only in B: {res['n_only_b']})",
        f"{metric} A {res['acc_a']:.4f}   B {res['acc_b']:.4f}   B - A = {res['diff']:+.4f}  95% paired bootstrap CI [{lo:+.4f}, {hi:+.4f}]",
        f"McNemar ({mc['method']}): A-wrong/B-right {mc['b01']}, A-right/B-wrong {mc['b10']}, p = {mc['p_value']:.4g}",
        f"subsumption eta(A|B) = {res['subsumption_a_given_b']:.3f}  (share of A's known facts B also knows)",
        f"subsumption eta(B|A) = {res['subsumption_b_given_a']:.3f}",
        f"Pearson r of per-relation {metric}: {res.get('pearson_per_relation', float('nan')):.3f}",
        "",
        f"{'relation':<14}{'n':>6}{short + ' A':>9}{short + ' B':>9}{'B - A':>9}",
    ]
    for rel, r in sorted(res["per_relation"].items()):
        lines.append(f"{rel:<14}{r['n']:>6}{r['acc_a']:>9.3f}{r['acc_b']:>9.3f}{r['diff']:>+9.3f}")
    return "\n".join(lines)


def _probe(name: str | None):
    from .probe_logging import probe_of

    return probe_of(name) if name else None


def _verdict(probe) -> str | None:
    return getattr(probe, "fact_verdict", None)


def comparable_probes() -> list[str]:
    """Registered probes whose runs `compare` joins: those declaring a per-fact verdict."""
    from factprobe.probes.registry import load_probes

    return [name for name, p in load_probes().items() if p.fact_verdict]


def compare_needs() -> str:
    """One clause naming what `compare` joins."""
    return (f"compare joins runs with one boolean verdict per fact, the multiple-choice runs and any probe declaring "
            f"one ({', '.join(comparable_probes())}), fact by fact on fact_id, one row per fact (or per fact and template)")


def check_compare_table(df: pd.DataFrame, desc: dict, name: str) -> str:
    """The verdict column of run `name` (`resolve_run`'s description `desc`): its probe's
    `fact_verdict` (by its `factprobe.probe` tag or the folder's run_config.json), `correct` when it
    names no probe. Raises ConfigError (one line: what the run is and what `compare` joins) when the
    probe declares no verdict, or the table lacks `fact_id`, `relation` or a boolean verdict on every row."""
    from factprobe.probes.registry import load_probes

    from .baseline import _folder_probe

    ref = desc.get("ref", "?")
    probe = (desc.get("tags") or {}).get(PROBE_TAG) or _folder_probe(ref)
    verdict = "correct"
    if probe is not None:
        known = load_probes().get(probe)
        if known is None or not known.fact_verdict:
            what = f" ({known.description.split(':')[0].strip()})" if known is not None else ""
            raise ConfigError(f"run {name} ({ref}) is a {probe} run{what}, with no verdict per fact; {compare_needs()}")
        verdict = known.fact_verdict
    missing = [c for c in ("fact_id", "relation", verdict) if c not in df.columns]
    if missing:
        raise ConfigError(f"run {name} ({ref}) has no {', '.join(map(repr, missing))} column; {compare_needs()}")
    if df[verdict].isna().any() or not df[verdict].isin([True, False, 0, 1]).all():
        raise ConfigError(f"run {name} ({ref}) has rows without a boolean `{verdict}` (not one verdict per fact); "
                          f"{compare_needs()}")
    return verdict


def _metric(desc: dict) -> str:
    from .baseline import _folder_probe

    probe = _probe((desc.get("tags") or {}).get(PROBE_TAG) or _folder_probe(desc.get("ref", "?")))
    head = getattr(probe, "headline_metric", None)
    return head.metric if head else "accuracy"


def cross_model_wanted(args) -> bool:
    """True when `compare` draws the cross-model maps: three or more runs, or any of their flags."""
    return (len(args.runs) > 2 or bool(getattr(args, "out", None)) or bool(getattr(args, "cross_model", False))
            or bool(getattr(args, "model_meta", None)) or bool(getattr(args, "intersect", False)))


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
    """The runs `refs` as `RunFacts` (per-fact table with the probe's verdict as `correct`, model,
    digest, configuration, probe) and the compared metric's name (the probes' headline metric)."""
    from factprobe.report.cross_model_maps import RunFacts

    from .baseline import _folder_probe

    out, metrics = [], []
    for i, ref in enumerate(refs, start=1):
        df, desc = resolve_run(ref, tracking_uri)
        verdict = check_compare_table(df, desc, str(i))
        if verdict != "correct":
            df = df.drop(columns=[c for c in ("correct",) if c in df.columns]).rename(columns={verdict: "correct"})
        config, digest = run_provenance(desc)
        probe = (desc.get("tags") or {}).get(PROBE_TAG) or _folder_probe(ref) or (config or {}).get("probe")
        out.append(RunFacts(model=_run_model(desc, config), table=df, ref=ref, digest=digest, config=config, probe=probe))
        metrics.append(_metric(desc))
    metric = metrics[0] if len(set(metrics)) == 1 else " / ".join(dict.fromkeys(metrics))
    return out, metric


def cross_model_cli(args) -> int:
    """The cross-model maps of `args.runs` (see the module docstring): printed, and written to
    `args.out` (cross_model.json, heatmap.png, pearson.png) when given."""
    import matplotlib.pyplot as plt

    from factprobe.io import atomic_write_json
    from factprobe.report.cross_model_maps import align_runs, build_maps, format_maps, maps_figures
    from factprobe.report.model_meta import resolve_model_meta

    if getattr(args, "model_meta", None) and not Path(args.model_meta).is_file():
        raise ConfigError(f"--model-meta {args.model_meta}: no such file")
    runs, metric = load_run_facts(list(args.runs), args.tracking_uri)
    aligned = align_runs(runs, intersect=bool(getattr(args, "intersect", False)),
                         templates=getattr(args, "templates", "majority"))
    metas = resolve_model_meta([r.model for r in runs], getattr(args, "model_meta", None))
    maps = build_maps(aligned, metas, metric)
    written = []
    if getattr(args, "out", None):
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
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


def compare_two_cli(args) -> int:
    """Two runs (`args.run_a`, `args.run_b`) fact by fact."""
    a, desc_a = resolve_run(args.run_a, args.tracking_uri)
    b, desc_b = resolve_run(args.run_b, args.tracking_uri)
    va = check_compare_table(a, desc_a, "a")
    vb = check_compare_table(b, desc_b, "b")
    a, b = a.rename(columns={va: "correct"}) if va != "correct" else a, b.rename(columns={vb: "correct"}) if vb != "correct" else b
    ma, mb = _metric(desc_a), _metric(desc_b)
    metric = ma if ma == mb else f"{ma} (A) / {mb} (B)"
    (config_a, digest_a), (config_b, digest_b) = run_provenance(desc_a), run_provenance(desc_b)
    try:
        data_note = check_same_data(config_a, config_b, digest_a, digest_b)
    except DataError as e:
        raise DataError(f"{e} (a = {args.run_a}, b = {args.run_b})") from None
    if data_note:
        print(data_note, file=sys.stderr)
    a, b, note = align_templates(a, b, getattr(args, "templates", "majority"))
    res = compare_runs(a, b, n_boot=args.n_boot)
    res["metric"] = metric
    if note:
        res["templates"] = note
    if data_note:
        res["data_note"] = data_note
    if args.json:
        print(json.dumps(res, indent=2, default=float))
    else:
        print(format_comparison(res, args.run_a, args.run_b, metric))
    return 0
