"""A served model's identity covers what it scores (issue 41 item 3): the fingerprint in its revision hashes the
log-probs the server gives (summed per fixed text, rounded to `FINGERPRINT_LOGPROB_STEP`), not only its greedy
text, so another quantization or checkpoint behind the same name and URL is another revision and a finished run
is not resumed as if it were the same model; noise far inside the step keeps the revision.
"""

from __future__ import annotations

import pytest

from factprobe.errors import FactprobeError
from factprobe.lm import served
from factprobe.lm.served_fingerprint import FINGERPRINT_LOGPROB_STEP, rounded_nats
from factprobe.models import model_revision


def test_log_probs_that_drift_under_the_same_greedy_text_change_the_revision(fake):
    first = model_revision(fake.spec())
    fake.drift = -0.2  # every log-prob 0.2 nats lower (another quantization): the greedy text does not change
    drifted = model_revision(fake.spec())
    assert drifted != first
    fake.drift = 0.0
    assert model_revision(fake.spec()) == first


@pytest.mark.parametrize("noise", [0.004, -0.004])
def test_noise_far_inside_the_step_keeps_the_revision(fake, noise):
    first = model_revision(fake.spec())
    fake.drift = noise  # batch-to-batch noise: a few thousandths of a nat per token
    assert model_revision(fake.spec()) == first


def test_the_revision_of_a_connected_model_carries_the_same_fingerprint(fake, tok):
    first = served.connect(fake.spec(), tokenizer=tok).revision
    assert first == model_revision(fake.spec())
    fake.drift = -0.2
    assert served.connect(fake.spec(), tokenizer=tok).revision != first


def test_rounding_is_to_the_nearest_step():
    step = FINGERPRINT_LOGPROB_STEP
    assert rounded_nats(-10.0) == round(-10.0 / step)
    assert rounded_nats(-10.0 + 0.4 * step) == rounded_nats(-10.0) == rounded_nats(-10.0 - 0.4 * step)
    assert rounded_nats(-10.0 - step) == rounded_nats(-10.0) - 1


def test_a_finished_run_is_not_resumed_when_the_log_probs_changed(fake, tmp_path):
    """The issue's case: an ic-lke run finished on one model; the server now gives other log-probs for the same
    greedy text (another quantization). Rerunning the command must not report the old rows with exit 0."""
    from factprobe.framework.config import RunConfig
    from factprobe.framework.runner import run_probe

    cfg = lambda: RunConfig.from_dict({"probe": "ic-lke", "model": fake.spec(), "relations": "P36", "max_facts_per_relation": 2})
    quiet = {"progress": False, "log": lambda s: None}
    out = tmp_path / "run"
    first = run_probe(cfg(), out, **quiet)
    again = run_probe(cfg(), out, **quiet)
    assert again.already_finished and again.metrics["model_revision"] == first.metrics["model_revision"]
    fake.drift = -0.2
    with pytest.raises(FactprobeError) as e:
        run_probe(cfg(), out, **quiet)
    assert "\n" not in str(e.value) and "revision" in str(e.value)
    fresh = run_probe(cfg(), tmp_path / "fresh", **quiet)
    assert fresh.metrics["model_revision"] != first.metrics["model_revision"]
