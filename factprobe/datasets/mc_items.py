"""Your own multiple-choice items (`factprobe probe mc-items --data FILE`): a file -> `Prepared` items.

One item per record, in a JSON list (`.json`), JSONL, CSV or Parquet file (`factprobe.io.open_table`
reads the last three). Fields (other column names are mapped with `--fields prompt=text,answer=label`):

- `prompt`: the sentence with one answer slot (`[Y]` unless `--slot` says otherwise), anywhere in it;
- `options`: the candidate fillers, a list (in CSV: a JSON list in the cell, `["Paris", "Lyon"]`);
  numbers are read as their text (`1879` -> "1879");
- `answer`: the gold option, as an integer index (0-based) or as the option's text. One rule in
  every format (a JSON number and a CSV cell `2` are read alike), set by `--answer-is`:
  `auto` (default): the option whose text equals the answer (a number as its text: 2 -> "2"), else
  the answer as an index; an answer that is both an option's text and the index of ANOTHER option
  (`1` with options "1", "2": "1" or "2"?) is refused as ambiguous, naming both readings;
  `text`: always an option's text; `index`: always a 0-based index;
- optional `id` (the item's stable id: `fact_id` is `<relation>|<id or prompt>|<answer>`) and
  `relation` (or `group`; default `items`): the per-relation tables group by it.

Each item becomes an `MCItem` whose `subject` is the prompt (slot included) and whose options
are the file's, in the file's order, so the multiple-choice rows, metrics, `compare` and
`regress` treat it as any other item. A bad record raises ONE `DataError` naming the file and the
record (`file:line`, `file: row N` or `file: item N`, plus the id when it has one): missing field,
missing slot (or more than one), fewer than 2 options, empty or duplicate options, an answer index
out of range, an answer text that is not an option, an ambiguous answer, a non-finite number
(`Infinity`) as an option, a CSV cell that is not a JSON list, or an id given twice. A CSV file
with an unterminated quote is refused naming the line the quote opens on (`factprobe.io.csv_rows`),
and a `--fields` mapping to a column the file lacks is refused naming the file's columns.

Training items for in-context examples (`--train-data`, the same format) become `Fact`s of the
`train` fact set: subject = prompt, object = gold; the probe fills the prompt with the gold.
A training item that is a test item is never an example (`leaks`): its prompt, or its prompt
filled with its answer, equals a test item's prompt or answered prompt in a normal form (`leak_key`:
Unicode NFKC, case folded, punctuation and whitespace removed), or it has a test item's (subject,
answer) pair in that form (`pair_key`: its id and its answer; an item without an id has its prompt
as its subject).
"""

from __future__ import annotations

import json
import math
import re
import string
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from ..facts import Fact, FactSet, MCItem
from ..io import open_table, read_text
from ..seeding import stable_rng
from .prepared import Prepared

#: the item fields a file may carry (`group` is another name for `relation`)
FIELDS = ("prompt", "options", "answer", "id", "relation", "group")
REQUIRED = ("prompt", "options", "answer")
DEFAULT_SLOT = "[Y]"
DEFAULT_RELATION = "items"
#: file formats: a JSON list, or what `open_table` reads
EXTENSIONS = (".json", ".jsonl", ".csv", ".parquet")


def parse_fields(text: str | None) -> dict[str, str]:
    """`"prompt=text,answer=label"` -> {"prompt": "text", "answer": "label"} (our field -> the file's
    column). "" or None: no mapping. An unknown field, a pair without `=`, or two fields mapped to
    one column raise ConfigError."""
    out: dict[str, str] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        ours, eq, theirs = pair.partition("=")
        ours, theirs = ours.strip(), theirs.strip()
        if not eq or not ours or not theirs:
            raise ConfigError(f"fields={text!r}: {pair.strip()!r} is not field=column (e.g. prompt=text,answer=label)")
        if ours not in FIELDS:
            raise ConfigError(f"fields={text!r}: unknown field {ours!r}; map one of {', '.join(FIELDS)}")
        if ours in out:
            raise ConfigError(f"fields={text!r}: field {ours!r} is mapped twice")
        out[ours] = theirs
    taken = list(out.values())
    dup = sorted({c for c in taken if taken.count(c) > 1})
    if dup:
        raise ConfigError(f"fields={text!r}: column {dup[0]!r} is mapped to two fields")
    return out


def read_records(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, record) for every record of a `.json` list, `.jsonl`, `.csv` or `.parquet` file;
    `where` names the file and the record (`file: item N` for a JSON list, 1-based)."""
    path = Path(path)
    if path.suffix.lower() != ".json":
        if path.suffix.lower() not in EXTENSIONS:
            raise DataError(f"{path}: unsupported item file format {path.suffix or '(none)'}; use {', '.join(EXTENSIONS)}")
        with open_table(path) as table:
            yield from table.records()
        return
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: malformed JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of items, got {type(data).__name__}")
    for i, rec in enumerate(data, start=1):
        if not isinstance(rec, dict):
            raise DataError(f"{path}: item {i}: expected a JSON object, got {type(rec).__name__}")
        yield f"{path}: item {i}", rec


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or (isinstance(value, float) and value != value)


def _options(value: Any, where: str) -> list[str]:
    if isinstance(value, str):  # a CSV cell (or a JSON string holding a list)
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise DataError(f'{where}: options {value!r} is not a JSON list ({e.msg}); write e.g. ["Paris", "Lyon"]') from None
    if hasattr(value, "tolist") and not isinstance(value, str):  # a numpy array from a parquet reader
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise DataError(f"{where}: options must be a list, got {type(value).__name__} {value!r}")
    out = []
    for o in value:
        if isinstance(o, bool) or not isinstance(o, (str, int, float)):
            raise DataError(f"{where}: option {o!r} is not text")
        if isinstance(o, float) and not math.isfinite(o):
            raise DataError(f'{where}: option {o!r} is not a finite number; write it as text ("inf") if it is one')
        o = o if isinstance(o, str) else str(o)
        if not o.strip():
            raise DataError(f"{where}: empty option in {list(value)!r}")
        out.append(o)
    return out


#: how an answer is read (`--answer-is`): `auto` (an option's text, else a 0-based index; an answer
#: that reads both ways, as different options, is refused), `index` or `text`
ANSWER_RULES = ("auto", "index", "text")
_INDEX = re.compile(r"-?[0-9]+")


def _as_index(answer: Any) -> int | None:
    """`answer` as a whole number (an int, an integral finite float, or ASCII digits), else None."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return answer
    if isinstance(answer, float):
        return int(answer) if math.isfinite(answer) and answer.is_integer() else None
    if isinstance(answer, str) and _INDEX.fullmatch(answer.strip()):
        return int(answer.strip())
    return None


def _as_text(answer: Any) -> str | None:
    """`answer` as an option's text (a number as its text: 2 and 2.0 -> "2"), else None."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, str):
        return answer
    if isinstance(answer, float) and math.isfinite(answer) and answer.is_integer():
        return str(int(answer))
    if isinstance(answer, (int, float)):
        return str(answer)
    return None


def _answer_index(answer: Any, options: list[str], where: str, rule: str = "auto") -> int:
    """The gold option's index: `answer` read by `rule` (`ANSWER_RULES`; the module docstring)."""
    text, index = _as_text(answer), _as_index(answer)
    by_text = None
    if text is not None and rule != "index":
        by_text = options.index(text) if text in options else options.index(text.strip()) if text.strip() in options else None
    by_index = index if index is not None and rule != "text" and 0 <= index < len(options) else None
    if by_text is not None and by_index is not None and by_text != by_index:
        raise DataError(
            f"{where}: answer {answer!r} is ambiguous: the option {options[by_text]!r} (index {by_text}) "
            f"or the option at index {by_index} ({options[by_index]!r}); "
            "say which with --answer-is text or --answer-is index"
        )
    if by_text is not None:
        return by_text
    if by_index is not None:
        return by_index
    if index is not None and rule != "text":
        raise DataError(f"{where}: answer index {index} out of range for {len(options)} options (0..{len(options) - 1})")
    if text is not None and rule != "index":
        raise DataError(f"{where}: answer {answer!r} is not among the options {options!r}")
    what = {
        "index": "a 0-based option index (--answer-is index)",
        "text": "an option's text (--answer-is text)",
        "auto": "an option index nor an option's text",
    }[rule]
    raise DataError(f"{where}: answer {answer!r} is {'neither ' if rule == 'auto' else 'not '}{what}")


def parse_item(rec: Mapping[str, Any], where: str, slot: str, fields: Mapping[str, str], answer_is: str = "auto") -> MCItem:
    """One record -> MCItem (see the module docstring; `answer_is`: `ANSWER_RULES`); DataError naming
    `where` for a bad record."""
    col = {f: fields.get(f, f) for f in FIELDS}
    raw_id = rec.get(col["id"])
    item_id = None if _missing(raw_id) else str(raw_id).strip()
    if item_id is not None:
        where = f"{where} (id {item_id})"
    for f in REQUIRED:
        if _missing(rec.get(col[f])):
            named = f if col[f] == f else f"{f} (column {col[f]!r})"
            raise DataError(f"{where}: missing field {named}")
    prompt = rec[col["prompt"]]
    if not isinstance(prompt, str):
        raise DataError(f"{where}: prompt must be text, got {type(prompt).__name__}")
    n_slots = prompt.count(slot)
    if n_slots == 0:
        raise DataError(f"{where}: prompt {prompt!r} has no answer slot {slot!r} (set --slot for another marker)")
    if n_slots > 1:
        raise DataError(f"{where}: prompt {prompt!r} has {n_slots} answer slots {slot!r}; give exactly one")
    options = _options(rec[col["options"]], where)
    if len(options) < 2:
        raise DataError(f"{where}: {len(options)} option(s) {options!r}; an item needs at least 2")
    seen: dict[str, int] = {}
    for o in options:
        key = o.strip()
        if key in seen:
            raise DataError(f"{where}: duplicate option {o!r} in {options!r}")
        seen[key] = 1
    gold_index = _answer_index(rec[col["answer"]], options, where, answer_is)
    rel = rec.get(col["relation"])
    if _missing(rel):
        rel = rec.get(col["group"])
    relation = DEFAULT_RELATION if _missing(rel) else str(rel).strip()
    gold = options[gold_index]
    return MCItem(
        relation=relation,
        subject=prompt,
        gold=gold,
        options=tuple(options),
        gold_index=gold_index,
        correct_objects=(gold,),
        subject_id=item_id,
    )


def load_items(
    path: str | Path, slot: str = DEFAULT_SLOT, fields: Mapping[str, str] | None = None, answer_is: str = "auto"
) -> list[MCItem]:
    """Every item of the file, in file order; DataError for the first bad record, for two items
    with one `fact_id` (the same id, or the same prompt and answer without ids), or for a `fields`
    mapping to a column that no record of the file has (naming the file's columns)."""
    fields = dict(fields or {})
    items: list[MCItem] = []
    first: dict[str, str] = {}
    columns: dict[str, None] = {}
    for where, rec in read_records(path):
        columns.update((str(k), None) for k in rec if k is not None)
        item = parse_item(rec, where, slot, fields, answer_is)
        if item.fact_id in first:
            what = f"id {item.subject_id!r}" if item.subject_id else "prompt and answer"
            raise DataError(
                f"{where}: same {what} as {first[item.fact_id]} (fact id {item.fact_id!r}); give each item its own id"
            )
        first[item.fact_id] = where
        items.append(item)
    absent = [f"{f}={c}" for f, c in fields.items() if c not in columns]
    if absent:
        raise DataError(
            f"{path}: --fields {', '.join(absent)}: no such column in the file; its columns: {', '.join(columns) or 'none'}"
        )
    if not items:
        raise DataError(f"{path}: no items")
    return items


#: what `leak_key` drops besides whitespace: every Unicode punctuation character (categories P*),
#: modifier symbols (Sk: ` ^ ´ ¨), format and control characters (Cf, Cc: zero-width spaces, word
#: joiners, a byte order mark) and the rest of ASCII's punctuation (`string.punctuation`: $ + < = > | ~)
_DROPPED_CATEGORIES = ("Sk", "Cf", "Cc")
_ASCII_PUNCTUATION = frozenset(string.punctuation)


def leak_key(text: str) -> str:
    """The normal form two texts are compared in: Unicode NFKC (fullwidth letters, ligatures such as
    "ﬁ", a non-breaking space, "ℌ" -> their plain forms), case folded (and NFKC again, as Unicode's
    compatibility caseless matching does), every punctuation character (`_DROPPED_CATEGORIES`) and all
    whitespace removed: `"The capital of  France is [Y]."`, `"ＴＨＥ CAPITAL OF FRANCE IS [Y]"` and
    `"the capital of france is y"` have one key."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return "".join(
        c
        for c in folded
        if not (
            c.isspace()
            or c in _ASCII_PUNCTUATION
            or unicodedata.category(c).startswith("P")
            or unicodedata.category(c) in _DROPPED_CATEGORIES
        )
    )


def item_keys(prompt: str, answer: str, slot: str = DEFAULT_SLOT) -> set[str]:
    """The text keys of an item: the `leak_key` of its prompt and of its prompt filled with its answer."""
    return {leak_key(prompt), leak_key(prompt.replace(slot, answer, 1))}


def pair_key(fact: Fact) -> tuple[str, str]:
    """The (subject, answer) key of an item as a fact (subject = prompt, object = answer, subject_id =
    id): the `leak_key` of its subject (`Fact.subject_key`: its id, else its prompt) and of its answer."""
    return leak_key(fact.subject_key), leak_key(fact.object)


#: why a training item is a test item (`LeakKeys.why`)
BY_TEXT, BY_PAIR = "text", "subject and answer"


@dataclass(frozen=True)
class LeakKeys:
    """What the test items are known by (`leak_keys`): the text keys of every test item (`item_keys`)
    and their (subject, answer) pairs (`pair_key`)."""

    texts: frozenset[str]
    pairs: frozenset[tuple[str, str]]

    def why(self, train: Fact, slot: str = DEFAULT_SLOT) -> str | None:
        """Why training item `train` (subject = prompt, object = answer) is a test item: `BY_TEXT` when its
        prompt or answered prompt has a test item's text key, else `BY_PAIR` when it has a test item's
        (subject, answer) pair (a test item's id and answer, however it is worded); None when it is none."""
        if item_keys(train.subject, train.object, slot) & self.texts:
            return BY_TEXT
        if pair_key(train) in self.pairs:
            return BY_PAIR
        return None


def leak_keys(test: Iterable[Fact], slot: str = DEFAULT_SLOT) -> LeakKeys:
    """The `LeakKeys` of the test items (facts: subject = prompt, object = answer, subject_id = id)."""
    test = list(test)
    texts = frozenset(k for f in test for k in item_keys(f.subject, f.object, slot))
    return LeakKeys(texts, frozenset(pair_key(f) for f in test))


def leaks(train: Fact, keys: LeakKeys, slot: str = DEFAULT_SLOT) -> bool:
    """Whether training item `train` is a test item (`LeakKeys.why`; `keys`: the test items' `leak_keys`)."""
    return keys.why(train, slot) is not None


def as_facts(items: list[MCItem], source: str) -> FactSet:
    """The items as facts (subject = prompt, object = gold, subject_id = id): the run's data digest."""
    return FactSet([Fact(it.relation, it.subject, it.gold, it.subject_id) for it in items], {}, source)


def _sample(items: list[MCItem], n: int | None, seed: int) -> list[MCItem]:
    """At most `n` items per relation, drawn from `seed` and the relation; file order kept."""
    if n is None:
        return items
    by_rel: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        by_rel.setdefault(it.relation, []).append(i)
    keep: set[int] = set()
    for rel, idx in by_rel.items():
        keep.update(idx if len(idx) <= n else stable_rng(seed, "mc_items", rel).sample(idx, n))
    return [it for i, it in enumerate(items) if i in keep]


def prepare_mc_items(
    base, slot: str = DEFAULT_SLOT, fields: Mapping[str, str] | None = None, answer_is: str = "auto"
) -> Prepared:
    """Load `base.data` (test items) and `base.train_data` (examples), select `base.relations`,
    sample `base.max_facts_per_relation` per relation; kind `mc-items`."""
    if not base.data:
        raise ConfigError("data=None: mc-items needs --data FILE (a .json list, .jsonl, .csv or .parquet of items)")
    items = load_items(base.data, slot, fields, answer_is)
    present = list(dict.fromkeys(it.relation for it in items))
    if base.relations:
        unknown = [r for r in base.relations if r not in present]
        if unknown:
            raise ConfigError(f"unknown relation(s) {', '.join(unknown)} in {base.data}; known: {', '.join(present)}")
        items = [it for it in items if it.relation in set(base.relations)]
    items = _sample(items, base.max_facts_per_relation, base.seed)
    grouped: dict[str, list[MCItem]] = {}
    for it in items:
        grouped.setdefault(it.relation, []).append(it)
    facts = {"test": as_facts(items, str(base.data))}
    if base.train_data:
        facts["train"] = as_facts(load_items(base.train_data, slot, fields, answer_is), str(base.train_data))
    return Prepared(kind="mc-items", items=grouped, facts=facts)
