"""Studies: experiments over one or more probes that the papers' figures come from (issue 20).

A study is one `Study` (`base.py`) registered by name in `registry.py` (the built-ins, and plug-in modules named
by `FACTPROBE_STUDY_MODULES` or the `factprobe.studies` entry points: docs/extending.md); `factprobe study NAME`
(`cli.py`) runs it into a claimed output folder and writes `metrics.json` atomically.
"""
