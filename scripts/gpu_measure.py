"""What `scripts/gpu_item6.py` measures around a timed region (issue 40 item 6), on a GPU or on the CPU.

- `ForwardTimer`: wraps the `forward` of the modules the scorer calls (the decoder body and the LM head,
  found by `factprobe.lm.body.decoder_parts`: the scorer never calls `model.forward` itself) and adds up,
  per call, the wall seconds inside (CUDA-synchronised before and after on a GPU, so a forward's kernels
  are counted inside it and nothing queued before it is), the process CPU seconds inside
  (`time.process_time`, every thread of the process), the body's calls (`forwards`) and the tokens
  given to it (`input_ids.numel()`).
- `UtilisationSampler`: GPU utilisation (NVML's `utilization.gpu`, the share of the last sample period in
  which any kernel ran, in percent) sampled every `interval_s` on a background thread during a region:
  through `pynvml` (nvidia-ml-py) when it imports, else `nvidia-smi --query-gpu=utilization.gpu -lms`;
  "n/a on CPU" on the CPU.
- `reset_peak_memory` / `peak_memory`: on CUDA `torch.cuda.max_memory_allocated` (and `_reserved`) since
  the reset, in bytes; on the CPU the process's peak resident set (`VmHWM`, bytes), reset through
  `/proc/self/clear_refs` where the kernel allows it (else the process's lifetime peak, said so).
- `peak_bf16_flops`: the dense bf16 peak of a GPU by its name (H100/H200 SXM 989e12, A100 312e12),
  None when unknown; `mfu`: achieved FLOPs (2 x parameters x forwarded tokens, the usual estimate: it
  leaves out attention's own FLOPs and counts the head for every token) over that peak.
- `samples`: a list of timings as {"median", "samples"}.
"""

from __future__ import annotations

import contextlib
import re
import resource
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch

#: dense bf16 peak FLOP/s by a substring of the device name (first match wins)
PEAK_BF16_DENSE = (("H200", 989e12), ("H100", 989e12), ("A100", 312e12))
NA_CPU = "n/a on CPU"


def is_cuda(device: str | torch.device) -> bool:
    return str(device).startswith("cuda")


def samples(values: Sequence[float]) -> dict[str, Any]:
    """{"median": the median, "samples": every value, in order}."""
    return {"median": statistics.median(values), "samples": list(values)}


def peak_bf16_flops(device_name: str) -> float | None:
    """The dense bf16 peak FLOP/s of the GPU named `device_name` (`PEAK_BF16_DENSE`), None when unknown."""
    return next((peak for key, peak in PEAK_BF16_DENSE if key.lower() in device_name.lower()), None)


def mfu(n_params: int, tokens: float, seconds: float, peak_flops: float | str | None) -> float | str:
    """Model FLOPs utilisation: 2 * n_params * tokens / seconds / peak_flops. Without a peak FLOP/s number
    the peak's own text ("n/a on CPU", ...) or "n/a"."""
    if isinstance(peak_flops, (int, float)) and peak_flops > 0:
        return 2 * n_params * tokens / seconds / peak_flops
    return peak_flops if isinstance(peak_flops, str) else "n/a"


class ForwardTimer:
    """Counts and times the calls into a model's decoder body and LM head (module docstring).
    Use as a context manager; `reset()` zeroes the counters."""

    def __init__(self, model: torch.nn.Module, device: str | torch.device) -> None:
        from factprobe.lm.body import decoder_parts

        parts = decoder_parts(model)
        self._modules = {"body": parts.body, "head": parts.head}
        self._sync = torch.cuda.synchronize if is_cuda(device) else (lambda: None)
        self._depth = 0
        self.reset()

    def reset(self) -> None:
        self.forwards = 0
        self.head_calls = 0
        self.tokens = 0
        self.wall_s = 0.0
        self.cpu_s = 0.0

    def _wrap(self, name: str, forward):
        def timed(*args, **kwargs):
            if self._depth:  # a call inside a timed call is counted by the outer one
                return forward(*args, **kwargs)
            self._depth += 1
            try:
                if name == "body":
                    ids = kwargs.get("input_ids", args[0] if args else None)
                    self.forwards += 1
                    self.tokens += int(ids.numel()) if ids is not None else 0
                else:
                    self.head_calls += 1
                self._sync()
                w, c = time.perf_counter(), time.process_time()
                out = forward(*args, **kwargs)
                self._sync()
                self.wall_s += time.perf_counter() - w
                self.cpu_s += time.process_time() - c
                return out
            finally:
                self._depth -= 1

        return timed

    def __enter__(self) -> ForwardTimer:
        self._saved = {}
        for name, module in self._modules.items():
            self._saved[name] = module.__dict__.get("forward")  # an accelerate hook's, if any: put back on exit
            module.forward = self._wrap(name, module.forward)  # an instance attribute: nn.Module.__call__ finds it
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, module in self._modules.items():
            if self._saved[name] is None:
                del module.forward  # the class's forward again
            else:
                module.forward = self._saved[name]


def _nvml_reader(index: int):
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return lambda: int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)


class UtilisationSampler:
    """GPU utilisation samples (percent) during a `with` block (module docstring). `summary()` is
    {"source", "interval_s", "samples", "mean", "median", "max"} on a GPU, "n/a on CPU" on the CPU, or
    {"error": ...} when neither NVML nor nvidia-smi answers."""

    def __init__(self, device: str | torch.device, interval_s: float = 0.05) -> None:
        self.cuda = is_cuda(device)
        self.index = (torch.device(device).index or 0) if self.cuda else 0
        self.interval_s = interval_s
        self.values: list[int] = []
        self.source: str | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen | None = None

    def _poll(self, read) -> None:
        while not self._stop.is_set():
            self.values.append(read())
            self._stop.wait(self.interval_s)

    def _read_smi(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if re.fullmatch(r"\s*\d+\s*", line):
                self.values.append(int(line))

    def __enter__(self) -> UtilisationSampler:
        if not self.cuda:
            return self
        try:
            read = _nvml_reader(self.index)
            read()
            self.source, target, args = "pynvml", self._poll, (read,)
        except Exception as err:  # noqa: BLE001  (no nvidia-ml-py, or NVML refuses: try nvidia-smi)
            try:
                cmd = ["nvidia-smi", f"--id={self.index}", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
                cmd.append(f"-lms={max(int(self.interval_s * 1000), 20)}")
                self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                self.source, target, args = "nvidia-smi", self._read_smi, ()
            except OSError as err2:
                self.error = f"pynvml: {type(err).__name__}: {err}; nvidia-smi: {err2}"
                return self
        self._thread = threading.Thread(target=target, args=args, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def summary(self) -> dict[str, Any] | str:
        if not self.cuda:
            return NA_CPU
        if self.error or not self.values:
            return {"error": self.error or f"{self.source}: no sample in the region"}
        return {
            "source": self.source,
            "interval_s": self.interval_s,
            "samples": len(self.values),
            "mean": statistics.fmean(self.values),
            "median": statistics.median(self.values),
            "max": max(self.values),
        }


def _vm_hwm_bytes() -> int | None:
    with contextlib.suppress(OSError):
        for line in open("/proc/self/status", encoding="ascii"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def reset_peak_memory(device: str | torch.device) -> bool:
    """Start a peak-memory window; True when the peak was reset (CUDA; the CPU where the kernel allows)."""
    if is_cuda(device):
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # resets VmHWM to the current resident set (Linux >= 4.0)
        return True
    except OSError:
        return False


def peak_memory(device: str | torch.device, was_reset: bool) -> dict[str, Any]:
    """The peak memory since `reset_peak_memory` (module docstring), in bytes."""
    if is_cuda(device):
        return {
            "kind": "torch.cuda.max_memory_allocated",
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(device),
        }
    hwm = _vm_hwm_bytes()
    if hwm is None:  # no /proc: the lifetime peak from getrusage (KiB on Linux)
        hwm, was_reset = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, False
    return {"kind": "process peak RSS", "scope": "since reset" if was_reset else "process lifetime", "peak_rss_bytes": hwm}


@contextlib.contextmanager
def region(device: str | torch.device, interval_s: float = 0.05) -> Iterator[dict[str, Any]]:
    """Measure a region: yields a dict filled on exit with `seconds` (wall, synchronised on CUDA),
    `process_cpu_s`, `gpu_utilisation` and `peak_memory`."""
    sync = torch.cuda.synchronize if is_cuda(device) else (lambda: None)
    out: dict[str, Any] = {}
    was_reset = reset_peak_memory(device)
    with UtilisationSampler(device, interval_s) as util:
        sync()
        w, c = time.perf_counter(), time.process_time()
        yield out
        sync()
        out["seconds"] = time.perf_counter() - w
        out["process_cpu_s"] = time.process_time() - c
    out["gpu_utilisation"] = util.summary()
    out["peak_memory"] = peak_memory(device, was_reset)
