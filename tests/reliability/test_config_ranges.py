"""Issue 18 items 3 and 18a: one range rule for every config's float options and seeds
(`factprobe.config.ConfigBase`), enforced with a one-line ConfigError naming the field."""

from __future__ import annotations

import pytest

from factprobe.errors import ConfigError
from factprobe.finetune import FinetuneConfig
from factprobe.framework.config import BaseConfig


@pytest.mark.parametrize(
    "field,value",
    [
        ("learning_rate", float("inf")),
        ("learning_rate", float("nan")),
        ("learning_rate", "nan"),
        ("learning_rate", "-inf"),
        ("weight_decay", float("inf")),
        ("weight_decay", "inf"),
        ("lora_dropout", float("nan")),
        ("warmup_ratio", "nan"),
    ],
)
def test_every_float_option_must_be_finite(field, value):
    """issue 18 item 3: a non-finite float option is refused, naming the field."""
    with pytest.raises(ConfigError, match=rf"^{field}=.*must be a finite number"):
        FinetuneConfig.from_dict({field: value})


@pytest.mark.parametrize("value", [0.0, -1e-4, "0"])
def test_learning_rate_must_be_positive(value):
    """issue 18 item 3: the learning rate is positive."""
    with pytest.raises(ConfigError, match=r"^learning_rate="):
        FinetuneConfig.from_dict({"learning_rate": value})


@pytest.mark.parametrize("cls", [FinetuneConfig, BaseConfig])
@pytest.mark.parametrize("seed", [-1, 2**32, 2**70, "-1"])
def test_one_seed_range_for_every_config(cls, seed):
    """issue 18 item 18a: 0 <= seed < 2**32 for the probes and fine-tuning alike (a value beyond the int64
    range of every integer option is refused as that first, issue 28 item 7)."""
    rule = (
        r"^seed=.*must be in \[0, 2\*\*32\)"
        if isinstance(seed, str) or abs(seed) < 2**63
        else r"^seed: \d+ is out of range; an integer option lies in \[-2\*\*63, 2\*\*63\)"
    )
    with pytest.raises(ConfigError, match=rule):
        cls.from_dict({"seed": seed})
    assert cls.from_dict({"seed": 2**32 - 1}).seed == 2**32 - 1
    assert cls(seed=0).seed == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["finetune", "--seed", "-1"],
        ["finetune", "--seed", str(2**70)],
        ["finetune", "--learning-rate", "nan"],
        ["finetune", "--weight-decay", "inf"],
    ],
)
def test_cli_refuses_bad_seed_and_non_finite_floats_in_one_line(argv, capsys):
    """issue 18 items 3 and 18a: the command line gives one `error:` line (exit 2), no traceback."""
    from factprobe.cli import main

    assert main([*argv, "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and argv[1].lstrip("-").replace("-", "_") in err
