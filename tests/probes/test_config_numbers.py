"""Issue 28 item 7: numbers a user can type into any option. `inf`, `1e999` (a float that overflows to
inf) and huge integers were an OverflowError traceback in `_coerce` for every integer option, in every
command and in `pipeline run`; now each is one `error:` line naming the option (exit 2)."""

from __future__ import annotations

import pytest

from factprobe.cli import main
from factprobe.errors import ConfigError
from factprobe.finetune.config import FinetuneConfig
from factprobe.framework.config import BaseConfig, RunConfig

HUGE = "9" * 40


@pytest.mark.parametrize(
    "value, why",
    [
        ("inf", "expected a whole number, got 'inf' (not finite)"),
        ("-inf", "expected a whole number, got '-inf' (not finite)"),
        ("Infinity", "expected a whole number, got 'Infinity' (not finite)"),
        ("nan", "expected a whole number, got 'nan' (not finite)"),
        ("1e999", "'1e999' is out of range; an integer option lies in [-2**63, 2**63)"),
        ("1e999999999", "'1e999999999' is out of range"),
        (HUGE, f"'{HUGE}' is out of range"),
        (10**40, f"{10**40} is out of range"),
        ("9" * 400, f"'{'9' * 29}...{'9' * 29}' (402 characters) is out of range"),
        (float("inf"), "expected a whole number, got inf (not finite)"),
        (2.5, "expected int, got 2.5"),
        ("²", "expected int, got '²'"),
    ],
)
def test_integer_option_refuses_non_finite_and_huge_values(value, why):
    with pytest.raises(ConfigError) as e:
        BaseConfig.from_dict({"max_facts_per_relation": value})
    assert str(e.value).startswith(f"max_facts_per_relation: {why}") and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("5", 5),
        ("5.0", 5),
        (5.0, 5),
        ("1e3", 1000),
        (" 7 ", 7),
        ("1_000", 1000),
        (str(2**63 - 1), 2**63 - 1),
        ("12345678901234567891", None),
    ],
)
def test_integer_option_reads_exact_whole_numbers(value, expected):
    """Kubeflow hands ints back as "5.0"; text is read exactly (no detour through a float that would turn
    12345678901234567891 into ...7168)."""
    if expected is None:
        with pytest.raises(ConfigError, match="out of range"):
            BaseConfig.from_dict({"token_budget": value})
    else:
        assert BaseConfig.from_dict({"token_budget": value}).token_budget == expected
    assert RunConfig.from_dict({"probe": "ic-lke", "seed": str(2**32 - 1)}).base.seed == 2**32 - 1


@pytest.mark.parametrize("value", ["inf", "1e999", "-inf", "nan", 10**400, HUGE * 10])
def test_float_option_refuses_non_finite_and_huge_values(value):
    """A float option: `inf` and `1e999` were already refused as not finite; an int too large for a float
    (10**400, as a pipeline's JSON may hand over) was an OverflowError."""
    with pytest.raises(ConfigError, match=r"^learning_rate"):
        FinetuneConfig.from_dict({"learning_rate": value})


@pytest.mark.parametrize(
    "argv",
    [
        ["probe", "mc-items", "--examples", "inf"],
        ["probe", "ic-lke", "--max-facts-per-relation", "1e999"],
        ["probe", "ic-lke", "--seed", HUGE],
        ["finetune", "--max-steps", "inf"],
        ["finetune", "--learning-rate", "1e999"],
        ["study", "icl-examples", "--draws", "1e999"],
        pytest.param(["pipeline", "run", "probe", "--param", "max_facts_per_relation=inf"], marks=pytest.mark.slow),
        pytest.param(["pipeline", "run", "probe", "--param", f"examples={HUGE}"], marks=pytest.mark.slow),
    ],
)
def test_every_command_prints_one_line(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
