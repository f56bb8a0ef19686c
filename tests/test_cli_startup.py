"""Start-up: a command imports what it needs (issue 31 item 10).

`factprobe --version`, `factprobe --help` and `factprobe models list` import neither torch nor
transformers nor mlflow (torch alone took 2-3 s; `--help` imported it through the study identity,
`models list` through a safetensors header check); `--version` does not even build the command tree.
One fresh interpreter runs the three in turn and reports the heavy modules loaded after each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

HEAVY = ("torch", "transformers", "mlflow")

CODE = """
import contextlib, io, json, sys
from factprobe.cli import main
seen = {}
for argv in (["--version"], ["--help"], ["models", "list"]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's --version and --help
            rc = e.code
    seen[" ".join(argv)] = {"rc": rc, "heavy": [m for m in HEAVY if m in sys.modules], "out": out.getvalue()[:200],
                            "tree": "factprobe.framework.registry" in sys.modules}
print(json.dumps(seen))
""".replace("HEAVY", repr(HEAVY))


def test_version_help_and_models_import_no_torch_transformers_or_mlflow():
    import json

    proc = subprocess.run([sys.executable, "-c", CODE], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["--version"]["out"].startswith("factprobe ") and seen["--version"]["rc"] == 0
    assert not seen["--version"]["tree"], "--version built the whole command tree (probe and study modules)"
    assert "probe" in seen["--help"]["out"] and seen["--help"]["rc"] == 0
    assert seen["models list"]["rc"] == 0 and "ALIAS" in seen["models list"]["out"]
    for command, what in seen.items():  # cumulative: the first command that lists a module imported it
        assert not what["heavy"], f"factprobe {command} imported {what['heavy']}"
