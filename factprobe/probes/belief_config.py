"""The config fields both BELIEF probes (belief-mlm, belief-icl) share and their one validation.

Each probe keeps its own field order (the CLI help and pipeline parameters follow it), so the
shared fields are made by these functions rather than inherited; `check_shared_fields` is the one
place their values are checked (and `template_sources` normalised)."""

from __future__ import annotations

from typing import Any

from ..config import ConfigBase, option
from ..datasets.multiprompt import TEMPLATE_SOURCES
from ..metrics.belief import MAX_DRAWS


def draws_field() -> Any:
    return option(10_000, "random one-template-per-relation draws for the accuracy and its range/stdev (zhao2024 uses 50,000)")


def template_sources_field() -> Any:
    return option(
        ",".join(TEMPLATE_SOURCES),
        f"comma-separated template sources, in de-duplication priority order, from {', '.join(TEMPLATE_SOURCES)}",
    )


def max_templates_field() -> Any:
    return option(None, "templates per relation: a seeded sample of this many (default: all of them)")


def belief_qa_templates_field() -> Any:
    return option(
        None,
        "question-style templates TSV, relation<TAB>template per line "
        "(default: factprobe's datasets/data/belief_qa_templates.tsv)",
    )


def templates_root_field() -> Any:
    return option(
        None,
        "data root the templates (lama/, pararel/, lpaqa/prompts/) are read from (default: the data "
        "root holding --data, else FACTPROBE_DATA); a note says when it is not where the facts come from",
    )


def check_shared_fields(cfg: ConfigBase) -> None:
    """Check `draws`, `max_templates` and `template_sources` of a BELIEF config (ConfigError naming
    the field) and normalise `template_sources` to its comma-joined, stripped sources."""
    cfg.check(
        1 <= cfg.draws <= MAX_DRAWS,
        "draws",
        cfg.draws,
        f"must be between 1 and {MAX_DRAWS:,} "  # type: ignore[attr-defined]
        "(the draws are held in memory; zhao2024 uses 50,000)",
    )
    cfg.check(
        cfg.max_templates is None or cfg.max_templates >= 1,
        "max_templates",
        cfg.max_templates,  # type: ignore[attr-defined]
        "must be >= 1 (or empty for all)",
    )
    srcs = [s.strip() for s in str(cfg.template_sources).split(",") if s.strip()]  # type: ignore[attr-defined]
    bad = [s for s in srcs if s not in TEMPLATE_SOURCES]
    cfg.check(
        bool(srcs) and not bad,
        "template_sources",
        cfg.template_sources,  # type: ignore[attr-defined]
        f"choose from {', '.join(TEMPLATE_SOURCES)}",
    )
    cfg.template_sources = ",".join(srcs)  # type: ignore[attr-defined]
