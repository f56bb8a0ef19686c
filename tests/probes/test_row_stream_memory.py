"""A run's peak memory does not grow with its rows (issue 40 item 3): 4,000 and 12,000 rows of 100
options (the `mc-synthetic` plug-in of benchmarks/bench_run_memory.py: synthetic scores, no model),
each run in its own process, peak RSS read from the kernel. Holding every row (about 25 KB each in
memory, plus the results file built as one string) made the larger run's peak about 200 MB higher.

Both sizes are past 4,000 rows of one relation, where the multiple-choice metrics' bootstrap reaches
its fixed batch (`factprobe.metrics.bootstrap`, 4 million resampled values, whatever the rows): what
is left to grow is what the run holds per row."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_run_memory import measure

#: what 8,000 more rows may add, 2 KB a row: its key, offset and item digest and the few numbers the
#: metrics read (measured: about 1.3 KB); a row held whole is about 25 KB
ALLOWED_MIB = 16.0


@pytest.mark.slow
def test_peak_memory_of_a_run_does_not_grow_with_its_rows():
    small, large = measure(None, 4000, 10, relations=1), measure(None, 12000, 10, relations=1)
    resumed = measure(None, 12000, 10, relations=1, resume=True)  # 6,000 rows read back from the checkpoint
    assert (small["rows"], large["rows"], resumed["rows"], resumed["resumed_rows"]) == (4000, 12000, 12000, 6000)
    for run, how in ((large, "fresh"), (resumed, "resumed")):
        grew = run["peak_rss_mib"] - small["peak_rss_mib"]
        assert grew < ALLOWED_MIB, f"peak RSS {small['peak_rss_mib']} MiB at 4,000 rows, {run['peak_rss_mib']} at 12,000 ({how})"
