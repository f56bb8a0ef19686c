"""LAMA / T-REx reader: relation metadata from `relations.jsonl`, facts from `P*.jsonl` files.

Layout accepted for `path` (the user's `--data`):
- a folder holding `relations.jsonl` and the `P*.jsonl` fact files directly, or the fact files
  in exactly one subfolder (`lama/` with `relations.jsonl` and `trex/P*.jsonl`);
- the fact-file folder itself (`lama/trex`): `relations.jsonl` is then looked up next to it
  and in its parent;
- one fact file (`lama/trex/P36.jsonl`), with `relations.jsonl` looked up the same way;
- the Google-RE folder itself (`lama/google_re`): relations `place_of_birth` and
  `place_of_death`. Google-RE is never picked up implicitly from the parent folder.

Fact files hold `sub_label, obj_label` and the entity ids `sub_uri, obj_uri` (Wikidata `Q...`,
Freebase `/m/...`); ids are kept so that all correct objects of an N-M pair are known.
A fact file for a relation missing from `relations.jsonl` still loads, with a default Relation
(label = id, cardinality inferred from its facts).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError
from ..facts import CARDINALITIES, FactSet, Relation
from ..io import read_jsonl
from ._common import check_relations, fact_files, read_fact_files, relations_for

RELATIONS_FILE = "relations.jsonl"

GOOGLE_RE_RELATIONS: dict[str, Relation] = {
    "place_of_birth": Relation(
        id="place_of_birth",
        label="place of birth",
        template="[X] was born in [Y] .",
        cardinality="N-1",
        description="Google-RE: place of birth of a person (Freebase ids)",
    ),
    "place_of_death": Relation(
        id="place_of_death",
        label="place of death",
        template="[X] died in [Y] .",
        cardinality="N-1",
        description="Google-RE: place of death of a person (Freebase ids)",
    ),
}


def load_relations_meta(path: str | Path) -> dict[str, Relation]:
    """Read a LAMA `relations.jsonl`: one object per line with `relation` (the id) and optional
    `label`, `template` (must hold `[X]` and `[Y]`), `type` (cardinality) and `description`.

    Returns {relation id: Relation} in file order. Raises DataError naming `file:line` for a
    malformed line, a bad template or cardinality, or a repeated relation id.
    """
    path = Path(path)
    out: dict[str, Relation] = {}
    first_line: dict[str, int] = {}
    for lineno, rec in read_jsonl(path, required=("relation",)):
        where = f"{path}:{lineno}"
        rid = str(rec["relation"]).strip()
        if rid in out:
            raise DataError(f"{where}: relation {rid} repeated (first at line {first_line[rid]})")
        template = rec.get("template") or None
        if template is not None and ("[X]" not in template or "[Y]" not in template):
            raise DataError(f"{where}: template {template!r} of {rid} lacks [X] or [Y]")
        cardinality = rec.get("type") or "N-1"
        if cardinality not in CARDINALITIES:
            raise DataError(f"{where}: relation {rid} has type {cardinality!r}; expected one of {', '.join(CARDINALITIES)}")
        out[rid] = Relation(
            id=rid,
            label=str(rec.get("label") or rid),
            template=template,
            cardinality=cardinality,
            description=str(rec.get("description") or ""),
        )
        first_line[rid] = lineno
    return out


def find_lama_layout(path: str | Path) -> tuple[dict[str, Path], Path | None]:
    """Locate the fact files and `relations.jsonl` under `path` (see the module docstring).

    Returns ({relation id: fact file}, relations file or None). Raises DataError when `path`
    does not exist, holds no fact files, or holds fact files in more than one subfolder.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: LAMA data folder not found")

    def relations_near(folder: Path) -> Path | None:
        for candidate in (folder / RELATIONS_FILE, folder.parent / RELATIONS_FILE):
            if candidate.is_file():
                return candidate
        return None

    if path.is_file():
        return {path.stem: path}, relations_near(path.parent)
    direct = fact_files(path)
    if direct:
        return direct, relations_near(path)
    google_re = {rid: path / f"{rid}.jsonl" for rid in GOOGLE_RE_RELATIONS if (path / f"{rid}.jsonl").is_file()}
    if google_re:
        return google_re, None
    subfolders = [d for d in sorted(path.iterdir()) if d.is_dir() and fact_files(d)]
    if len(subfolders) > 1:
        names = ", ".join(d.name for d in subfolders)
        raise DataError(f"{path}: P*.jsonl fact files in several subfolders ({names}); pass one of them")
    if not subfolders:
        raise DataError(f"{path}: no P*.jsonl fact files (looked in the folder and its subfolders)")
    own = path / RELATIONS_FILE
    return fact_files(subfolders[0]), own if own.is_file() else relations_near(subfolders[0])


def load_lama(path: str | Path, relations: list[str] | None = None) -> FactSet:
    """Load LAMA-style facts from `path` (layout in the module docstring).

        `relations` restricts loading to those ids (only their files are read); an id without a
        fact file raises ConfigError listing the known ones. The FactSet's `source` is
        `lama:<path>`; its relations are those with facts, in natural id order. An empty fact file
    is a DataError naming it when its relation is asked for, else skipped with a warning.
    """
    path = Path(path)
    files, relations_file = find_lama_layout(path)
    source = f"lama:{path}"
    wanted = check_relations(relations, files, source)
    meta = dict(GOOGLE_RE_RELATIONS)
    if relations_file is not None:
        meta.update(load_relations_meta(relations_file))
    facts = read_fact_files(files, wanted)
    return FactSet(facts=facts, relations=relations_for(facts, meta), source=source)
