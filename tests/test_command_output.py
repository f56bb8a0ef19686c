"""Every command's output is its own (issue 31 item 6).

A command's WHOLE output (stdout and stderr of a real `factprobe` process, so that what libraries print
when they load is seen too) holds only factprobe's lines. Before, a CLI probe printed transformers'
"Loading weights" bar under --no-progress, its token-length warning and its `past_key_values`
deprecation line; a fine-tune that diverges printed DeepSpeed's `[real_accelerator]` warning and its
op-build line, the weights bar, the `is_gradient_checkpointing` FutureWarning, accelerate's
"[RANK 0] Gradient accumulation steps mismatch" line and the Trainer's raw log dict before its one
`error:` line.

Tiny RANDOM models (factprobe/models/testing.py): no number here is a result.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

#: the lines a multiple-choice probe prints (factprobe/cli.py cmd_probe, framework/runner.py, framework/reporting.py)
PROBE_LINES = (
    r"identity: model \S+, data sha256:\w+, config \w+, .*factprobe \S+",
    r"note: .*",
    r"relation +n +accuracy +95% CI +prob_mass",
    r"(P\d+|micro|macro) +(\d+ +)?\d\.\d{3} +\[\d\.\d{3}, \d\.\d{3}\]( +\d\.\d{3})?",
    r"ic-lke \S+: accuracy \d\.\d{3} over \d+ items \(\d+ scored now, \d+ resumed\); results in \S+",
    r"tokens forwarded [\d,]+ vs [\d,]+ for one full forward per option \(\d+\.\d% saved\)",
    r"",
)


def _factprobe(args: list[str], cwd: Path, timeout: int = 280) -> subprocess.CompletedProcess:
    """`factprobe ARGS` in a fresh Python process (stdout and stderr merged, as a terminal shows them)."""
    env = dict(os.environ)
    # as a user's shell has it: Python's default warning filters, and nothing that quiets the libraries
    for name in ("PYTHONWARNINGS", "TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS", "CI"):
        env.pop(name, None)
    # not a launcher's child: an earlier in-process fine-tune of this test worker set these for its own
    # (still open) process group, and a child inheriting its MASTER_PORT would find the port taken
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "factprobe.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )


def _foreign(lines: list[str], allowed: tuple[str, ...]) -> list[str]:
    """The lines that match none of the `allowed` patterns (whole line)."""
    return [ln for ln in lines if not any(re.fullmatch(p, ln) for p in allowed)]


@pytest.mark.slow  # a CLI process that loads transformers and scores (15 s on 2 cores)
def test_cli_probe_output_is_its_own(tiny_model_path, real_data_root, tmp_path):
    out = tmp_path / "run"
    proc = _factprobe(
        [
            "probe",
            "ic-lke",
            "--model",
            str(tiny_model_path("llama")),
            "--source",
            "lama",
            "--data",
            str(real_data_root / "lama"),
            "--relations",
            "P36",
            "--max-facts-per-relation",
            "2",
            "--no-progress",
            "--no-track",
            "--out",
            str(out),
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("ic-lke ") for ln in lines), proc.stdout
    assert _foreign(lines, PROBE_LINES) == [], proc.stdout


@pytest.mark.slow  # DeepSpeed fine-tuning on CPU, two optimizer steps
def test_cli_finetune_that_diverges_prints_one_line(tiny_model_path, tmp_path):
    """The largest --lora-alpha the command line takes diverges at step 2 under ZeRO-0
    (tests/finetune/test_training_must_learn.py): its whole output is the one `error:` line."""
    out = tmp_path / "ft"
    proc = _factprobe(
        [
            "finetune",
            "--model",
            str(tiny_model_path("llama")),
            "--train-set",
            "regular",
            "--train-size",
            "16",
            "--batch-size",
            "8",
            "--grad-accum",
            "2",
            "--max-steps",
            "2",
            "--learning-rate",
            "3e-3",
            "--lr-scheduler",
            "constant",
            "--lora-r",
            "4",
            "--lora-alpha",
            "9000000000000000000",
            "--zero-stage",
            "0",
            "--device",
            "cpu",
            "--no-progress",
            "--out",
            str(out),
        ],
        tmp_path,
        timeout=400,
    )
    assert proc.returncode == 2, proc.stdout
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: training diverged at step 2 of 2"), proc.stdout


# ------------------------------------------------------------------ the pieces, in this process
def test_the_past_key_values_warnings_are_filtered():
    """Both spellings transformers 5.x used for the `past_key_values` deprecation, as a FutureWarning."""
    import factprobe.lm

    messages = [
        ("`past_key_values` is deprecated and will be removed in version 5.40.0 for `LlamaModel.forward`. Use `cache` instead."),
        "`past_key_values`/`cache_params` are deprecated. Use `cache` instead.",
        ("`is_gradient_checkpointing` is deprecated and will be removed in v6. Use `is_activation_checkpointing` instead."),
    ]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")  # what is shown without factprobe's filters ...
        factprobe.lm.quiet_libraries()  # ... and with them, installed again on top
        for m in messages:
            warnings.warn(m, FutureWarning, stacklevel=1)
        warnings.warn("another FutureWarning", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["another FutureWarning"]


def test_library_lines_are_dropped_and_others_pass(capsys):
    from factprobe.lm import without_library_lines

    with without_library_lines():
        print("kept 1")
        print("DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully")
        sys.stdout.write("kept ")
        sys.stdout.write("2\nunfinished")
    assert capsys.readouterr().out == "kept 1\nkept 2\nunfinished"
