"""mc-items data (no model): the four file formats, --fields, and one clear line per bad item."""

import json
from pathlib import Path

import pandas as pd
import pytest

from factprobe.datasets.mc_items import load_items, parse_fields, prepare_mc_items
from factprobe.errors import ConfigError, DataError
from factprobe.framework.config import BaseConfig
from factprobe.probes.mc_items import MCItemsConfig

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "examples" / "mc_items" / "cloze.jsonl"

ITEMS = [
    {
        "id": "a",
        "relation": "capital",
        "prompt": "The capital of France is [Y]",
        "options": ["Paris", "Lyon", "Nice"],
        "answer": "Paris",
    },
    {"id": "b", "relation": "capital", "prompt": "[Y] is the capital of Spain.", "options": ["Seville", "Madrid"], "answer": 1},
    {"id": "c", "group": "years", "prompt": "Water boils at [Y] degrees.", "options": ["50", "100", "2"], "answer": "2"},
]


def write(path: Path, records: list[dict], csv_lists: bool = True) -> Path:
    """`records` as a .json list, .jsonl, .csv (options as a JSON list cell) or .parquet file."""
    if path.suffix == ".json":
        path.write_text(json.dumps(records))
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif path.suffix == ".csv":
        df = pd.DataFrame(
            [{k: (json.dumps(v) if isinstance(v, list) and csv_lists else v) for k, v in r.items()} for r in records]
        )
        df.to_csv(path, index=False)
    else:
        pd.DataFrame([{**r, "answer": str(r["answer"])} for r in records]).to_parquet(path, index=False)
    return path


def summary(items):
    return [(it.relation, it.subject, it.options, it.gold_index, it.subject_id) for it in items]


EXPECTED = [
    ("capital", ITEMS[0]["prompt"], ("Paris", "Lyon", "Nice"), 0, "a"),
    ("capital", ITEMS[1]["prompt"], ("Seville", "Madrid"), 1, "b"),
    ("years", ITEMS[2]["prompt"], ("50", "100", "2"), 2, "c"),
]


@pytest.mark.parametrize("ext", [".json", ".jsonl", ".csv", ".parquet"])
def test_every_format_reads_the_same_items(tmp_path, ext):
    items = load_items(write(tmp_path / f"items{ext}", ITEMS))
    assert summary(items) == EXPECTED
    # the answer text "2" is the option "2" (not index 2); an index answer also works; group -> relation
    assert items[2].gold == "2" and items[1].gold == "Madrid"
    assert items[0].fact_id == "capital|a|Paris"


def test_a_string_answer_that_is_no_option_is_an_index(tmp_path):
    rec = {**ITEMS[0], "answer": "1"}
    (item,) = load_items(write(tmp_path / "i.csv", [rec]))
    assert item.gold == "Lyon"


def test_fields_map_other_column_names(tmp_path):
    renamed = [
        {
            "text": r["prompt"],
            "choices": r["options"],
            "label": r["answer"],
            "qid": r["id"],
            "topic": r.get("relation", r.get("group")),
        }
        for r in ITEMS
    ]
    path = write(tmp_path / "renamed.csv", renamed)
    fields = parse_fields("prompt=text,options=choices,answer=label,id=qid,relation=topic")
    assert summary(load_items(path, fields=fields)) == EXPECTED
    with pytest.raises(DataError, match=rf"^{path}:2: missing field prompt$"):
        load_items(path)  # without the mapping the columns are not found
    with pytest.raises(DataError, match=rf"^{path}:2 \(id a\): missing field answer \(column 'answer_text'\)$"):
        load_items(path, fields={**fields, "answer": "answer_text"})


def test_the_fixture_is_a_4_option_cloze_set_with_slots_at_end_middle_and_start():
    items = load_items(FIXTURE)
    assert len(items) == 20 and all(len(it.options) == 4 for it in items)
    where = {("end" if it.subject.endswith("[Y]") else "start" if it.subject.startswith("[Y]") else "middle") for it in items}
    assert where == {"end", "middle", "start"}


def test_parse_fields_errors():
    assert parse_fields("") == {} and parse_fields("prompt = text , answer=label") == {"prompt": "text", "answer": "label"}
    for bad, why in (
        ("prompt", "not field=column"),
        ("question=text", "unknown field 'question'"),
        ("prompt=a,prompt=b", "mapped twice"),
        ("prompt=a,answer=a", "column 'a' is mapped to two fields"),
    ):
        with pytest.raises(ConfigError, match=why):
            parse_fields(bad)
    with pytest.raises(ConfigError, match="fields="):
        MCItemsConfig(fields="nope=x")
    with pytest.raises(ConfigError, match="slot"):
        MCItemsConfig(slot=" ")


GOOD = {"id": "q7", "prompt": "The capital of France is [Y]", "options": ["Paris", "Lyon"], "answer": "Paris"}
BAD_ITEMS = [
    ({"prompt": "The capital of France is ___"}, "has no answer slot '[Y]'"),
    ({"prompt": "[Y] is the capital of [Y]"}, "has 2 answer slots"),
    ({"options": ["Paris"], "answer": 0}, "1 option(s) ['Paris']; an item needs at least 2"),
    ({"answer": 2}, "answer index 2 out of range for 2 options"),
    ({"answer": "Rome"}, "answer 'Rome' is not among the options"),
    ({"options": ["Paris", "Lyon", "Paris"]}, "duplicate option 'Paris'"),
    ({"options": ["Paris", ""]}, "empty option"),
    ({"answer": None}, "missing field answer"),
    ({"options": "Paris, Lyon"}, "is not a JSON list"),
    ({"options": {"a": 1}}, "options must be a list"),
]


@pytest.mark.parametrize("ext", [".jsonl", ".json"])
@pytest.mark.parametrize("change,why", BAD_ITEMS, ids=[w for _, w in BAD_ITEMS])
def test_bad_item_is_one_line_naming_file_and_record(tmp_path, ext, change, why):
    recs = [dict(GOOD, id="q1"), {**GOOD, **change}]
    path = write(tmp_path / f"items{ext}", recs)
    with pytest.raises(DataError) as e:
        load_items(path)
    msg = str(e.value)
    where = f"{path}:2" if ext == ".jsonl" else f"{path}: item 2"
    assert msg.startswith(f"{where} (id q7): ") and why in msg and "\n" not in msg, msg


def test_missing_field_and_bad_csv_list_name_the_csv_line(tmp_path):
    path = tmp_path / "items.csv"
    path.write_text('id,prompt,options,answer\nq1,A [Y],"[""x"", ""y""]",x\nq2,B [Y],"[""x"", ""y""",x\nq3,C [Y],,x\n')
    with pytest.raises(DataError, match=rf"^{path}:3 \(id q2\): options .* is not a JSON list"):
        load_items(path)
    path.write_text("id,prompt,options,answer\nq3,C [Y],,x\n")
    with pytest.raises(DataError, match=rf"^{path}:2 \(id q3\): missing field options$"):
        load_items(path)
    pq = write(tmp_path / "items.parquet", [dict(GOOD, id="q1"), dict(GOOD, id="q2", answer="5")])
    with pytest.raises(DataError, match=rf"^{pq}: row 2 \(id q2\): answer index 5 out of range"):
        load_items(pq)


def test_duplicate_ids_and_files(tmp_path):
    path = write(tmp_path / "items.jsonl", [GOOD, dict(GOOD)])
    with pytest.raises(DataError, match=rf"^{path}:2: same id 'q7' as {path}:1 "):
        load_items(path)
    no_id = {k: v for k, v in GOOD.items() if k != "id"}
    path = write(tmp_path / "noid.jsonl", [no_id, no_id])
    with pytest.raises(DataError, match="same prompt and answer"):
        load_items(path)
    with pytest.raises(DataError, match="file not found"):
        load_items(tmp_path / "missing.json")
    with pytest.raises(DataError, match="unsupported item file format .txt"):
        load_items(tmp_path / "items.txt")
    (tmp_path / "obj.json").write_text('{"prompt": "x"}')
    with pytest.raises(DataError, match="expected a JSON list"):
        load_items(tmp_path / "obj.json")


def test_prepare_selects_relations_samples_and_needs_data(tmp_path):
    path = write(tmp_path / "items.jsonl", ITEMS)
    prep = prepare_mc_items(BaseConfig(data=str(path)))
    assert list(prep.items) == ["capital", "years"] and prep.n_items == 3
    assert list(prepare_mc_items(BaseConfig(data=str(path), relations="years")).items) == ["years"]
    assert [len(v) for v in prepare_mc_items(BaseConfig(data=str(path), max_facts_per_relation=1)).items.values()] == [1, 1]
    with pytest.raises(ConfigError, match="unknown relation"):
        prepare_mc_items(BaseConfig(data=str(path), relations="P36"))
    with pytest.raises(ConfigError, match="needs --data FILE"):
        prepare_mc_items(BaseConfig())
    # the digest follows the items: another answer is another data set
    other = write(tmp_path / "other.jsonl", [ITEMS[0], ITEMS[1], {**ITEMS[2], "answer": 0}])
    assert prepare_mc_items(BaseConfig(data=str(other))).digest() != prep.digest()
