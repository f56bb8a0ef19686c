"""The questions of the closed-book QA dataset (`factprobe.datasets.qa`, FACT-Bench, Yuan et al. 2024):
question templates and the rule that a question never gives its answer away.

Questions come from hand-written templates (`data/qa_templates.tsv`, `load_question_templates`),
one line per relation: its answer type (entity | date | number) and one or more templates that
hold the subject slot `[X]` exactly once and never the object. Following the paper's question
rules (appendix A, Table 5) the templates name the answer's category ("In which city was [X]
born?"), and a question must not contain a correct answer:

- `make_question(fact, template)` fills `[X]` with the subject and raises DataError when a
  correct answer (the fact's object, and any label passed in `forbidden`) occurs in the question,
  case-insensitively as a whole word sequence ("What is Cambridge Airport named after?" contains
  "Cambridge"; "Lotus" does not contain "Lot").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from ..facts import Fact
from ..io import open_text, utf8_text
from ..metrics.qa import ANSWER_TYPES

DEFAULT_TEMPLATES = Path(__file__).resolve().parent / "data" / "qa_templates.tsv"
HEADER = ("relation", "answer_type", "templates")
OPTIONAL_HEADER = ("label",)
TEMPLATE_SEPARATOR = "||"
SUBJECT_SLOT = "[X]"
_SLOT = re.compile(r"\[[A-Za-z]\]")


# ------------------------------------------------------------------ templates
@dataclass(frozen=True)
class QuestionTemplate:
    """The question templates of one relation: `templates` (each with `[X]` once, no object
    slot), the `answer_type` of its objects (entity | date | number), an optional human `label`,
    and `where` (`file:line` it was read from, for messages)."""

    relation: str
    answer_type: str
    templates: tuple[str, ...]
    label: str = ""
    where: str = ""

    def __post_init__(self) -> None:
        if self.answer_type not in ANSWER_TYPES:
            raise ValueError(f"{self.relation}: answer_type must be one of {ANSWER_TYPES}, got {self.answer_type!r}")
        if not self.templates:
            raise ValueError(f"{self.relation}: no templates")


#: relation id -> its templates, as `load_question_templates` returns them
QuestionTemplates = dict[str, QuestionTemplate]


def check_template(template: str, where: str) -> str:
    """`template` stripped, or DataError naming `where` and the template when it lacks `[X]`,
    holds it more than once, holds `[Y]` (the object) or another `[.]` slot, or is empty."""
    t = template.strip()
    if not t:
        raise DataError(f"{where}: empty template (templates are separated by ' || ')")
    n = t.count(SUBJECT_SLOT)
    if n == 0:
        raise DataError(f"{where}: template {t!r} has no [X] slot for the subject")
    if n > 1:
        raise DataError(f"{where}: template {t!r} has [X] {n} times; the subject must appear once")
    if "[Y]" in t:
        raise DataError(f"{where}: template {t!r} has a [Y] slot; a question must not contain the object")
    others = sorted(set(_SLOT.findall(t)) - {SUBJECT_SLOT})
    if others:
        raise DataError(f"{where}: template {t!r} has unknown slot(s) {', '.join(others)}; only [X] is filled")
    return t


def load_question_templates(path: str | Path | None = None) -> QuestionTemplates:
    """Read a question-template TSV (default `DEFAULT_TEMPLATES`): {relation: QuestionTemplate}.

    Format: UTF-8 text; lines starting with `#` and blank lines are ignored; the first other line
    is the header `relation<TAB>answer_type<TAB>templates`, optionally `<TAB>label`; then one line
    per relation with those columns, `templates` holding one or more templates separated by
    ` || `. Raises DataError naming `file:line` and the value for: a missing file, bytes that
    are not UTF-8, a bad header, a line with the wrong number of columns, an empty relation id,
    an unknown answer type, a template without `[X]`, with `[X]` twice, with `[Y]` or another
    slot, a template repeated within its relation, a repeated relation, and a file without any
    relation.
    """
    path = Path(path) if path is not None else DEFAULT_TEMPLATES
    out: QuestionTemplates = {}
    first_line: dict[str, int] = {}
    header: tuple[str, ...] | None = None
    with open_text(path, encoding="utf-8-sig", newline="") as fh, utf8_text(path):
        for lineno, raw in enumerate(fh, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{path}:{lineno}"
            cols = [c.strip() for c in line.split("\t")]
            if header is None:
                if tuple(cols[:3]) != HEADER or tuple(cols[3:]) not in ((), OPTIONAL_HEADER):
                    raise DataError(
                        f"{where}: header must be 'relation<TAB>answer_type<TAB>templates' "
                        f"(optionally '<TAB>label'), got {line!r}"
                    )
                header = tuple(cols)
                continue
            if not 3 <= len(cols) <= len(header):
                raise DataError(
                    f"{where}: malformed line: expected {len(header)} tab-separated columns "
                    f"({', '.join(header)}), got {len(cols)}: {line!r}"
                )
            rid, answer_type, text = cols[:3]
            label = cols[3] if len(cols) > 3 else ""
            if not rid or any(ch.isspace() for ch in rid):
                raise DataError(f"{where}: malformed relation id {rid!r}")
            if rid in out:
                raise DataError(f"{where}: relation {rid} repeated (first at line {first_line[rid]})")
            if answer_type not in ANSWER_TYPES:
                raise DataError(f"{where}: unknown answer_type {answer_type!r} for {rid}; use one of {', '.join(ANSWER_TYPES)}")
            templates: list[str] = []
            for t in text.split(TEMPLATE_SEPARATOR):
                t = check_template(t, where)
                if t in templates:
                    raise DataError(f"{where}: template {t!r} repeated for {rid}")
                templates.append(t)
            out[rid] = QuestionTemplate(rid, answer_type, tuple(templates), label, where)
            first_line[rid] = lineno
    if header is None or not out:
        raise DataError(f"{path}: no question templates (expected a header line and one line per relation)")
    return out


# ------------------------------------------------------------------ questions
def _word_pattern(label: str) -> re.Pattern:
    return re.compile(r"(?<!\w)" + re.escape(label.casefold()) + r"(?!\w)")


def gives_away(question: str, labels: Iterable[str]) -> str | None:
    """The first of `labels` that occurs in `question` (case-insensitively, `str.casefold`, as a
    whole: not inside a longer word), or None."""
    folded = question.casefold()
    for label in labels:
        label = label.strip()
        if label and _word_pattern(label).search(folded):
            return label
    return None


def make_question(fact: Fact, template: str, forbidden: Iterable[str] = ()) -> str:
    """`template` with `[X]` replaced by the fact's subject.

    Raises DataError when the question would give the answer away: the fact's object label, or
    any label in `forbidden` (the subject's other correct objects), occurs in it (`gives_away`).
    A template without exactly one `[X]`, or with `[Y]`, raises DataError too.
    """
    template = check_template(template, f"template for {fact.relation}")
    question = template.replace(SUBJECT_SLOT, fact.subject)
    hit = gives_away(question, [fact.object, *forbidden])
    if hit is not None:
        what = "the object" if hit == fact.object.strip() else "a correct answer"
        raise DataError(f"{fact.fact_id}: question {question!r} contains {what} {hit!r}")
    return question
