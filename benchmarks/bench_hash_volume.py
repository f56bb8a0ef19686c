"""Hashing once per volume (issue 40 item 4): what a model folder's content revision costs the first
pod, a later pod on the same volume, a later pod without the volume's hash store (as every new pod was
before it), and a pod after one file was edited in place.

The folder: `config.json` and `--files` shards of `--gb` GB of random bytes each, made under `--root`
(default: the system temp folder; its free space is checked first) and deleted at the end. After it is
written (and after every edit) the script waits out the store's racy window (`RACY_NS`, 2 s), as any
model folder a pod loads is older than that.

A pod is a fresh Python process with a fresh per-machine cache (`FACTPROBE_CACHE` = a new empty
folder): a new pod on another node. It times `identity.folder_revision(folder)` and counts the bytes it
read (`rchar` of /proc/self/io: every byte passed through read(2), page cache or not) and the files it
hashed (`identity.reads`). Per round (`--repeats`, default 3):

- `first`: the volume's store deleted first: every file is read and the store written;
- `second`: another new pod: the store answers;
- `no_store`: another new pod with `FACTPROBE_VOLUME_HASHES=off`: every file is read again, as a new
  pod did before the store (the per-machine cache, keyed by inode and device, is lost with the pod);
- `after_edit`: one shard (a different one each round) edited in place, same size, mtime set back
  (its ctime changes), then a new pod: only that shard is read; its revision differs from `first`'s.

Medians over the rounds are reported, with ratios. The files are in the page cache (just written), so
hashing is CPU-bound here; from a network volume the first pod is slower and the ratios larger.

Run: `.venv/bin/python benchmarks/bench_hash_volume.py` (~1-2 min with 3 x 1 GB on 2 busy cores);
writes `benchmarks/results/hash_volume.json` atomically and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from factprobe.io import atomic_write_json
from factprobe.volume_hashes import RACY_NS, STORE_NAME

POD = r"""
import json, sys, time
from pathlib import Path
from factprobe import identity

def rchar():
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])

r0, t0 = rchar(), time.perf_counter()
rev = identity.folder_revision(sys.argv[1])
t1, r1 = time.perf_counter(), rchar()
print(json.dumps({"seconds": t1 - t0, "bytes_read": r1 - r0, "files_hashed": identity.reads, "revision": rev}))
"""
CHUNK = 16 * 1024**2


def make_folder(folder: Path, files: int, size: int) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    for i in range(files):
        with (folder / f"model-{i + 1:05d}-of-{files:05d}.safetensors").open("wb") as f:
            left = size
            while left:
                n = min(CHUNK, left)
                f.write(os.urandom(n))
                left -= n
            f.flush()
            os.fsync(f.fileno())


def edit_in_place(path: Path, round_no: int) -> None:
    """Overwrite 16 bytes in the middle of `path` (same size, same inode) and set its mtime back."""
    st = path.stat()
    time.sleep(0.05)
    with path.open("r+b") as f:
        f.seek(st.st_size // 2 + round_no)
        f.write(os.urandom(16))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = path.stat()
    assert (now.st_size, now.st_mtime_ns) == (st.st_size, st.st_mtime_ns) and now.st_ctime_ns != st.st_ctime_ns


def wait_out_racy_window() -> None:
    time.sleep(RACY_NS / 1e9 + 0.2)


def pod(folder: Path, caches: Path, store: bool = True) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="machine-", dir=caches))
    env = {**os.environ, "FACTPROBE_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    env.pop("FACTPROBE_VOLUME_HASHES", None)
    if not store:
        env["FACTPROBE_VOLUME_HASHES"] = "off"
    out = subprocess.run([sys.executable, "-c", POD, str(folder)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=3, help="weight shards (3)")
    ap.add_argument("--gb", type=float, default=1.0, help="GB (10^9 bytes) per shard (1.0)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (3)")
    ap.add_argument("--root", default=tempfile.gettempdir(), help="where the folder is made (the temp folder)")
    ap.add_argument("--out", default=str(HERE / "results" / "hash_volume.json"))
    args = ap.parse_args()
    size = int(args.gb * 1e9)
    need = args.files * size + 1024**3
    free = shutil.disk_usage(args.root).free
    if free < need:
        sys.exit(f"error: {args.root} has {free / 1e9:.1f} GB free, the folder needs {need / 1e9:.1f} GB (--root, --gb)")
    work = Path(tempfile.mkdtemp(prefix="bench-hash-volume-", dir=args.root))
    try:
        folder, caches = work / "volume" / "model", work / "caches"
        caches.mkdir()
        t0 = time.perf_counter()
        make_folder(folder, args.files, size)
        made_s = time.perf_counter() - t0
        wait_out_racy_window()
        shards = sorted(p for p in folder.iterdir() if p.suffix == ".safetensors")
        rounds: dict[str, list[dict]] = {"first": [], "second": [], "no_store": [], "after_edit": []}
        for r in range(args.repeats):
            (folder / STORE_NAME).unlink(missing_ok=True)
            rounds["first"].append(pod(folder, caches))
            rounds["second"].append(pod(folder, caches))
            rounds["no_store"].append(pod(folder, caches, store=False))
            before = rounds["second"][-1]["revision"]
            edited = shards[r % len(shards)]
            edit_in_place(edited, r)
            wait_out_racy_window()
            row = pod(folder, caches)
            row["edited"], row["revision_changed"] = edited.name, row["revision"] != before
            rounds["after_edit"].append(row)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]['seconds']:.3f} s" for k, v in rounds.items()), flush=True)
        total = sum(p.stat().st_size for p in folder.iterdir() if not p.name.startswith("."))
        med = {k: {m: median(v, m) for m in ("seconds", "bytes_read", "files_hashed")} for k, v in rounds.items()}
        tiny = 1e-4  # seconds: a floor so a ratio over a near-zero time stays finite
        ratios = {
            "first_over_second_seconds": med["first"]["seconds"] / max(med["second"]["seconds"], tiny),
            "no_store_over_second_seconds": med["no_store"]["seconds"] / max(med["second"]["seconds"], tiny),
            "first_over_after_edit_seconds": med["first"]["seconds"] / max(med["after_edit"]["seconds"], tiny),
            "second_bytes_over_folder": med["second"]["bytes_read"] / total,
            "after_edit_bytes_over_folder": med["after_edit"]["bytes_read"] / total,
            "after_edit_bytes_over_one_shard": med["after_edit"]["bytes_read"] / size,
        }
        result = {
            "workload": {"files": args.files + 1, "shards": args.files, "shard_bytes": size, "folder_bytes": total},
            "folder_written_s": made_s,
            "hash_gb_per_s_first_pod": total / 1e9 / med["first"]["seconds"],
            "medians": med,
            "ratios": ratios,
            "every_edit_changed_the_revision": all(r["revision_changed"] for r in rounds["after_edit"]),
            "rounds": rounds,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.out, portable(result))
        gb = total / 1e9
        print(f"folder: {args.files} shards x {size / 1e9:.2f} GB + config.json = {gb:.2f} GB; medians of {args.repeats} rounds")
        for k, m in med.items():
            print(f"  {k:<10} {m['seconds']:8.3f} s  {m['bytes_read'] / 1e9:7.3f} GB read  {m['files_hashed']:.0f} files hashed")
        print(
            f"first pod / second pod: {ratios['first_over_second_seconds']:.0f}x time; "
            f"new pod without the store / second pod: {ratios['no_store_over_second_seconds']:.0f}x; "
            f"second pod read {ratios['second_bytes_over_folder']:.2e} of the folder; "
            f"after an edit: {ratios['after_edit_bytes_over_one_shard']:.3f} shard read "
            f"({ratios['after_edit_bytes_over_folder']:.3f} of the folder), {ratios['first_over_after_edit_seconds']:.1f}x "
            f"faster than the first pod, revision changed every time: {result['every_edit_changed_the_revision']}"
        )
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
