"""`factprobe finetune` defaults to the paper's full-parameter training (yuan2024 section 5; issue 29 item 5).

Configuration only: nothing is trained here."""

from __future__ import annotations

import pytest

from factprobe.cli import build_parser
from factprobe.config import namespace_to_dict
from factprobe.errors import ConfigError
from factprobe.finetune.config import FinetuneConfig


def _from_command_line(*flags: str) -> FinetuneConfig:
    args = build_parser().parse_args(["finetune", *flags])
    return FinetuneConfig.from_dict(namespace_to_dict(args, (FinetuneConfig,)))


def test_the_default_is_full_parameter_training_as_in_the_pipeline():
    assert FinetuneConfig().lora_r == 0 and not FinetuneConfig().use_lora
    assert not _from_command_line().use_lora
    assert not _from_command_line("--full").use_lora


def test_lora_stays_a_flag():
    cfg = _from_command_line("--lora-r", "16")
    assert cfg.use_lora and cfg.lora_r == 16 and cfg.alpha == 32
    with pytest.raises(ConfigError, match=r"--lora-r 8 would be ignored"):
        FinetuneConfig(full=True, lora_r=8)


def test_help_says_which_setting_is_the_papers(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "full-parameter training (yuan2024's setting and the default" in text
    assert "cheaper but not the paper's setting" in text
