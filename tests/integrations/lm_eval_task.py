"""A local-data lm-evaluation-harness task for the `--model factprobe` tests and benchmark.

`build_task(data_root, folder, items=20, shots=25)` writes into `folder`:
- `test.json`: `items` 4-option questions from LAMA T-REx P36 (capitals), "The capital of <subject> is"
  with the right capital and three other capitals of the relation as distractors (seeded order);
- `train.json`: `shots` solved examples from the LPAQA T-REx *training* facts of P36 (disjoint
  from the test facts), used as the in-context examples;
- `factprobe_capitals.yaml`: a `multiple_choice` task over the two files, `num_fewshot: shots`
  with the `first_n` sampler, so every question sees the same 25 examples (a k-shot block as
  benchmarks ship it) and 4 `loglikelihood` requests share one context.
Nothing of ../shared/data is copied into the repository; the files live in `folder`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TASK = "factprobe_capitals"
RELATION = "P36"
TEMPLATE = "The capital of {} is"


def _facts(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _item(fact: dict, pool: list[str], rng: random.Random) -> dict:
    """One 4-option record: the right object and three distinct other objects of the relation."""
    wrong = rng.sample([o for o in pool if o != fact["obj_label"]], 3)
    choices = [fact["obj_label"], *wrong]
    rng.shuffle(choices)
    return {"question": TEMPLATE.format(fact["sub_label"]), "choices": choices, "answer": choices.index(fact["obj_label"])}


def build_task(data_root: Path, folder: Path, items: int = 20, shots: int = 25, seed: int = 0) -> Path:
    """Write the task files into `folder` (see the module docstring) and return `folder`."""
    rng = random.Random(seed)
    test_facts = _facts(Path(data_root) / "lama" / "trex" / f"{RELATION}.jsonl")
    train_facts = _facts(Path(data_root) / "lpaqa" / "trex_train" / f"{RELATION}.jsonl")
    pool = sorted({f["obj_label"] for f in test_facts + train_facts})
    test_subjects = {f["sub_label"] for f in test_facts}
    train = [f for f in train_facts if f["sub_label"] not in test_subjects]
    folder.mkdir(parents=True, exist_ok=True)
    records = {
        "test": [_item(f, pool, rng) for f in rng.sample(test_facts, items)],
        "train": [_item(f, pool, rng) for f in rng.sample(train, shots)],
    }
    for split, rows in records.items():
        (folder / f"{split}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (folder / f"{TASK}.yaml").write_text(f"""task: {TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    train: {folder / "train.json"}
    test: {folder / "test.json"}
  cache_dir: {folder / "hf-datasets"}
output_type: multiple_choice
training_split: train
fewshot_split: train
test_split: test
num_fewshot: {shots}
fewshot_config:
  sampler: first_n
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
