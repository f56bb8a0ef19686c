"""A local-data lm-evaluation-harness task for the `--model factprobe` tests and benchmark.

`build_task(data_root, folder, items=20, shots=25, sampler="first_n")` writes into `folder`:
- `test.json`: `items` 4-option questions from LAMA T-REx P36 (capitals), "The capital of <subject> is"
  with the right capital and three other capitals of the relation as distractors (seeded order);
- `train.json`: `shots` solved examples from the LPAQA T-REx *training* facts of P36 (disjoint
  from the test facts), used as the in-context examples (`train_default.json` for the `default`
  sampler: `POOL_FACTOR` x `shots` of them to draw from; `test.json` is the same for both);
- `<task_name(sampler)>.yaml`: a `multiple_choice` task over the two files, `num_fewshot: shots`.
  With the `first_n` sampler (task `factprobe_capitals`) every question sees the same examples (a
  k-shot block as MMLU-style benchmarks ship it) and 4 `loglikelihood` requests share one context;
  with lm-eval's `default` sampler (task `factprobe_capitals_default`) each question draws its own
  examples from the training split (seeded), so only a question's own choices share its context.
  Both tasks can be written into one folder (same data files), and one TaskManager finds both.
Nothing of ../shared/data is copied into the repository; the files live in `folder`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TASK = "factprobe_capitals"
RELATION = "P36"
TEMPLATE = "The capital of {} is"
#: lm-eval few-shot samplers the task is built with: one shared block, or each question its own examples
SAMPLERS = ("first_n", "default")
#: the `default` sampler draws each question's `shots` examples from this many times as many training facts
POOL_FACTOR = 4


def task_name(sampler: str = "first_n") -> str:
    """The task's name for `sampler`: `TASK` for `first_n`, `TASK_<sampler>` otherwise."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler {sampler!r}: expected one of {', '.join(SAMPLERS)}")
    return TASK if sampler == "first_n" else f"{TASK}_{sampler}"


def _facts(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _item(fact: dict, pool: list[str], rng: random.Random) -> dict:
    """One 4-option record: the right object and three distinct other objects of the relation."""
    wrong = rng.sample([o for o in pool if o != fact["obj_label"]], 3)
    choices = [fact["obj_label"], *wrong]
    rng.shuffle(choices)
    return {"question": TEMPLATE.format(fact["sub_label"]), "choices": choices, "answer": choices.index(fact["obj_label"])}


def build_task(data_root: Path, folder: Path, items: int = 20, shots: int = 25, seed: int = 0, sampler: str = "first_n") -> Path:
    """Write the task files for `sampler` into `folder` (see the module docstring) and return `folder`."""
    name = task_name(sampler)
    rng = random.Random(seed)
    test_facts = _facts(Path(data_root) / "lama" / "trex" / f"{RELATION}.jsonl")
    train_facts = _facts(Path(data_root) / "lpaqa" / "trex_train" / f"{RELATION}.jsonl")
    pool = sorted({f["obj_label"] for f in test_facts + train_facts})
    test_subjects = {f["sub_label"] for f in test_facts}
    train = [f for f in train_facts if f["sub_label"] not in test_subjects]
    folder.mkdir(parents=True, exist_ok=True)
    n_train = shots if sampler == "first_n" else min(len(train), POOL_FACTOR * shots)
    train_file = "train.json" if sampler == "first_n" else f"train_{sampler}.json"
    records = {
        "test.json": [_item(f, pool, rng) for f in rng.sample(test_facts, items)],
        train_file: [_item(f, pool, rng) for f in rng.sample(train, n_train)],
    }
    for file, rows in records.items():
        (folder / file).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (folder / f"{name}.yaml").write_text(f"""task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    train: {folder / train_file}
    test: {folder / "test.json"}
  cache_dir: {folder / "hf-datasets"}
output_type: multiple_choice
training_split: train
fewshot_split: train
test_split: test
num_fewshot: {shots}
fewshot_config:
  sampler: {sampler}
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
target_delimiter: " "
fewshot_delimiter: "\\n"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
""")
    return folder
