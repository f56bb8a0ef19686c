"""Issue 28 item 7, mc-items data: hostile answers (`Infinity`, `"²"`, an answer that is an index in JSONL and
a text in CSV), `--fields` naming a column the file lacks, a CSV with an unterminated quote: each one clear
DataError line naming the file and the record (no traceback), nothing silently ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.cli import main
from factprobe.datasets.mc_items import load_items, parse_fields, prepare_mc_items
from factprobe.errors import ConfigError, DataError
from factprobe.framework.config import BaseConfig, RunConfig

GOOD = {"id": "q1", "prompt": "The capital of France is [Y]", "options": ["Paris", "Lyon"], "answer": "Paris"}


def jsonl(path: Path, recs: list[dict], raw: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs) + raw)
    return path


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------ answers
def test_infinity_answer_is_one_line(tmp_path):
    """JSON `Infinity` is a float inf: int(inf) was an OverflowError traceback."""
    path = jsonl(tmp_path / "i.jsonl", [GOOD], '{"id": "q2", "prompt": "A [Y]", "options": ["x", "y"], "answer": Infinity}\n')
    with pytest.raises(DataError) as e:
        load_items(path)
    assert one_line(e).startswith(f"{path}:2 (id q2): answer inf is not among the options")


def test_infinity_option_is_one_line(tmp_path):
    path = jsonl(tmp_path / "i.jsonl", [], '{"id": "q2", "prompt": "A [Y]", "options": [1, Infinity], "answer": 0}\n')
    with pytest.raises(DataError) as e:
        load_items(path)
    assert one_line(e).startswith(f"{path}:1 (id q2): option inf is not a finite number")


@pytest.mark.parametrize("answer", ["²", "٣", "-1", "1.5"])
def test_digit_like_answers_are_one_line(tmp_path, answer):
    """ "²".isdigit() is True but int("²") a ValueError traceback; other non-ASCII digits alike."""
    path = jsonl(tmp_path / "i.jsonl", [{**GOOD, "answer": answer}])
    with pytest.raises(DataError) as e:
        load_items(path)
    msg = one_line(e)
    assert msg.startswith(f"{path}:1 (id q1): answer ") and (repr(answer) in msg or answer in msg)


AMBIGUOUS = {"id": "n1", "prompt": "Spiders have [Y] pairs of legs.", "options": ["4", "1", "3", "2"], "answer": 1}


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_answer_that_is_an_index_and_another_options_text_is_refused_in_every_format(tmp_path, fmt):
    """`1` with options "4", "1", ...: index 1 is "1" (the same option, no doubt); but "3" means index 3
    ("2") or the option "3" (index 2). Today JSONL read it as the index and CSV as the text: refused in both,
    naming both readings and the option that settles it."""
    rec = {**AMBIGUOUS, "answer": 3}
    if fmt == "jsonl":
        path = jsonl(tmp_path / "i.jsonl", [rec])
    else:
        path = tmp_path / "i.csv"
        path.write_text('id,prompt,options,answer\nn1,Spiders have [Y] pairs of legs.,"[""4"", ""1"", ""3"", ""2""]",3\n')
    with pytest.raises(DataError) as e:
        load_items(path)
    msg = one_line(e)
    assert msg.startswith(f"{path}:2 (id n1): answer" if fmt == "csv" else f"{path}:1 (id n1): answer")
    assert "ambiguous" in msg and "'3' (index 2)" in msg and "index 3 ('2')" in msg and "--answer-is" in msg
    # --answer-is settles it, the same way in both formats
    assert load_items(path, answer_is="text")[0].gold_index == 2
    assert load_items(path, answer_is="index")[0].gold_index == 3


def test_answers_that_agree_or_have_one_reading_are_read_alike_in_jsonl_and_csv(tmp_path):
    recs = [
        {**AMBIGUOUS, "answer": 1},  # index 1 is the option "1": one option either way
        {**AMBIGUOUS, "id": "n2", "answer": "4"},  # "4" is an option, index 4 is out of range: the text
        {**GOOD, "id": "n3", "answer": 1},
    ]  # no option "1": the index
    a = load_items(jsonl(tmp_path / "i.jsonl", recs))
    csv = tmp_path / "i.csv"
    csv.write_text(
        "id,prompt,options,answer\n"
        + "".join(
            f'{r["id"]},{r["prompt"]},"{json.dumps(r["options"]).replace(chr(34), chr(34) * 2)}",{r["answer"]}\n' for r in recs
        )
    )
    b = load_items(csv)
    assert [it.gold for it in a] == [it.gold for it in b] == ["1", "4", "Lyon"]


def test_answer_is_index_or_text_refuses_the_other_kind(tmp_path):
    path = jsonl(tmp_path / "i.jsonl", [GOOD])
    with pytest.raises(DataError, match=r"answer 'Paris' is not a 0-based option index \(--answer-is index\)"):
        load_items(path, answer_is="index")
    path = jsonl(tmp_path / "j.jsonl", [{**GOOD, "answer": 1}])
    with pytest.raises(DataError, match=r"answer 1 is not among the options"):
        load_items(path, answer_is="text")
    with pytest.raises(ConfigError, match="answer_is: unknown value 'both'"):
        RunConfig.from_dict({"probe": "mc-items", "data": str(path), "answer_is": "both"})


# ------------------------------------------------------------------ --fields
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_fields_naming_a_missing_column_is_refused(tmp_path, fmt):
    """`--fields relation=topic` on a file without `topic` used to be ignored (every item in `items`)."""
    if fmt == "jsonl":
        path = jsonl(tmp_path / "i.jsonl", [{**GOOD, "relation": "capital"}])
    else:
        path = tmp_path / "i.csv"
        path.write_text(
            'id,prompt,options,answer,relation\nq1,The capital of France is [Y],"[""Paris"", ""Lyon""]",Paris,capital\n'
        )
    for mapping, named in (("relation=topic", "relation=topic"), ("id=qid,group=kind", "id=qid, group=kind")):
        with pytest.raises(DataError) as e:
            load_items(path, fields=parse_fields(mapping))
        assert one_line(e) == (
            f"{path}: --fields {named}: no such column in the file; its columns: id, prompt, options, answer, relation"
        )
    assert load_items(path, fields=parse_fields("relation=relation"))[0].relation == "capital"


def test_fields_missing_column_on_the_command_line(tmp_path, capsys):
    path = jsonl(tmp_path / "i.jsonl", [GOOD])
    rc = main(
        [
            "probe",
            "mc-items",
            "--data",
            str(path),
            "--fields",
            "relation=topic",
            "--no-track",
            "--no-progress",
            "--out",
            str(tmp_path / "out"),
            "--model",
            "unused-model",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    expected = f"error: {path}: --fields relation=topic: no such column in the file; its columns: id, prompt, options, answer"
    assert rc == 2 and err == [expected]


# ------------------------------------------------------------------ CSV quotes
def test_csv_with_an_unterminated_quote_is_refused_naming_the_line(tmp_path):
    """A lenient csv reader took the rest of the file as one value: 2 items instead of 4, no error."""
    path = tmp_path / "items.csv"
    path.write_text(
        "id,prompt,options,answer\n"
        'q1,A [Y],"[""x"", ""y""]",x\n'
        'q2,"B [Y],"[""x"", ""y""]",x\n'  # the quote before B is never closed
        'q3,C [Y],"[""x"", ""y""]",x\n'
        'q4,D [Y],"[""x"", ""y""]",x\n'
    )
    with pytest.raises(DataError) as e:
        load_items(path)
    assert one_line(e).startswith(f"{path}:3: malformed CSV (")
    path.write_text('id,prompt,options,answer\nq1,A [Y],"[""x"", ""y""]",x\nq2,"B [Y],x,x\nq3,C [Y],x,x\n')
    with pytest.raises(DataError) as e:
        load_items(path)
    assert one_line(e) == f"{path}:3: malformed CSV (unexpected end of data): a quoted value opened here is never closed"


def test_train_data_gets_the_same_checks(tmp_path):
    test = jsonl(tmp_path / "t.jsonl", [GOOD])
    train = jsonl(tmp_path / "tr.jsonl", [{**GOOD, "answer": "²"}])
    with pytest.raises(DataError, match=rf"^{train}:1 \(id q1\): answer '²' is not among the options"):
        prepare_mc_items(BaseConfig(data=str(test), train_data=str(train)))
