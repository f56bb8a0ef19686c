"""Issue 37 item 6: BELIEF's range is one number for one set of rows. The probe's `acc_range`
(`factprobe.metrics.belief`) and the findings' fluctuation claim (`findings_prompts.prompt_fluctuation`)
take the same draws of one template per relation, so they report the same max - min of Acc@1."""

import numpy as np
import pandas as pd

from factprobe.metrics.belief import belief_accuracy, draw_cache, draw_template_indices
from factprobe.metrics.findings_prompts import prompt_fluctuation


def _rows(seed: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(6):
        for p in range(8):
            for t in range(3):
                rows.append(
                    {
                        "relation": f"P{r}",
                        "fact_id": f"P{r}-{p}",
                        "template_id": f"P{r}:t{t}",
                        "correct": bool(rng.random() < 0.2 + 0.2 * t),
                        "prediction": "x",
                    }
                )
    return rows


def test_probe_range_and_findings_range_are_one_number():
    rows = _rows()
    for n_draws, seed in ((25, 0), (40, 7), (2000, 3)):
        probe = belief_accuracy(pd.DataFrame(rows), "acc@1", n_draws=n_draws, seed=seed)
        claim = prompt_fluctuation("m", rows, n_draws=n_draws, n_boot=20, seed=seed, min_correct=0)
        assert claim.detail["acc_range"] == probe["range"]
        assert claim.detail["draw_mean_acc"] == probe["mean"]


def test_relation_template_draws_are_the_probes_draws():
    from factprobe.metrics.belief import relation_template_draws

    df = pd.DataFrame(_rows())
    cache = draw_cache(df, df["correct"].to_numpy(dtype=float))
    per_rel = draw_template_indices(cache, 50, 5)
    for rel, tids, idx in zip(cache.relations, cache.template_ids, per_rel):
        assert np.array_equal(relation_template_draws(rel, len(tids), 50, 5), idx)
