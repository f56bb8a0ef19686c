"""Which Kubeflow Pipelines backend a compiled pipeline needs, and a `--compat` form for older ones.

kfp 2.17 / kfp-kubernetes 2.17 write fields that older KFP backends refuse: the driver decodes each
step's Kubernetes config strictly and fails the step with `unknown field "<name>" in
kfp_kubernetes.SecretAsEnv` (kubeflow/pipelines#11935, #12495). `FEATURES` lists every field our
compiled YAML can hold with the first backend release that reads it (k8s/README.md has the same
table with the sources); `required_features(spec)` finds those a compiled spec uses and
`check_backend(version, ...)` compares them with the server's version, which the API server reports
as `tag_name` on `GET /apis/v2beta1/healthz` (`{"commit_sha": ..., "tag_name": "2.5.0", ...}`).

`compat_platform_spec(platform)` drops the fields that have an older equivalent: the secret's
`secretNameParameter` (its plain `secretName` stays), `optional: false` (absent means the same:
the secret must exist; an optional secret such as the Hugging Face token has no older form and is
left out, `compat_notes` says so), the container `securityContext` (the images already run as UID 1000;
enforce non-root for the namespace with Pod Security Admission, see k8s/README.md) and a sweep unit's
node selector and tolerations read from a step's output (the static GPU ones written beside them stay).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from factprobe.errors import ConfigError

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Feature:
    """One field of the compiled YAML and the first KFP backend release that honours it.

    name: the field as it appears in the YAML; since: (major, minor, patch); source: where that
    version comes from (a release note, issue or PR of kubeflow/pipelines; "assumed" where no
    source pins it); older: what `--compat` compiles instead ("" = no older equivalent);
    rejected: True when older backends fail the step, False when they silently ignore the field."""

    name: str
    since: Version
    source: str
    older: str
    rejected: bool
    used_by: Callable[[dict, dict], bool]

    @property
    def since_text(self) -> str:
        return ".".join(map(str, self.since))


def _executors(platform: dict) -> list[dict]:
    return list(
        ((platform.get("platforms") or {}).get("kubernetes") or {}).get("deploymentSpec", {}).get("executors", {}).values()
    )


def _secrets(platform: dict) -> list[dict]:
    return [s for e in _executors(platform) for s in e.get("secretAsEnv") or []]


def _containers(spec: dict) -> list[dict]:
    return [e.get("container") or {} for e in spec.get("deploymentSpec", {}).get("executors", {}).values()]


def _tasks(spec: dict) -> list[dict]:
    out = list(spec.get("root", {}).get("dag", {}).get("tasks", {}).values())
    for comp in spec.get("components", {}).values():
        out += list((comp.get("dag") or {}).get("tasks", {}).values())
    return out


FEATURES: tuple[Feature, ...] = (
    Feature(
        "secretAsEnv",
        (2, 0, 0),
        "feat(backend): support secrets, kubeflow/pipelines#9178 (April 2023, before 2.0.0)",
        "",
        True,
        lambda s, p: bool(_secrets(p)),
    ),
    Feature(
        "nodeSelector",
        (2, 1, 0),
        "present in 2.1.0 (earlier 2.0.x releases not checked)",
        "",
        True,
        lambda s, p: any("nodeSelector" in e for e in _executors(p)),
    ),
    Feature(
        "tolerations",
        (2, 1, 0),
        "2.1.0 release notes: backend support for tolerations, #10471",
        "",
        True,
        lambda s, p: any("tolerations" in e for e in _executors(p)),
    ),
    Feature(
        "podMetadata (pod labels)",
        (2, 1, 0),
        "2.1.0 release notes: pod labels and annotations, #10393",
        "",
        True,
        lambda s, p: any("podMetadata" in e for e in _executors(p)),
    ),
    Feature(
        "secretAsEnv.secretNameParameter",
        (2, 5, 0),
        "2.5.0 release notes: input parameters for secrets, #11621/#11770; older backends fail with "
        'unknown field "secretNameParameter" (#11935)',
        "secretName (a constant name)",
        True,
        lambda s, p: any("secretNameParameter" in x for x in _secrets(p)),
    ),
    Feature(
        "secretAsEnv.optional",
        (2, 15, 0),
        'assumed: written since kfp-kubernetes 2.15; older backends fail with unknown field "optional" (#12495)',
        "left out (false is the default: the secret must exist)",
        True,
        lambda s, p: any("optional" in x for x in _secrets(p)),
    ),
    Feature(
        "securityContext",
        (2, 17, 0),
        "assumed: set_security_context (#12832, #12859, Feb 2026) ships in kfp-kubernetes 2.17.0; older backends "
        "do not know the field",
        "left out: the images run as UID 1000; enforce non-root per namespace with Pod Security Admission (k8s/README.md)",
        True,
        lambda s, p: any("securityContext" in e for e in _executors(p)),
    ),
    Feature(
        "nodeSelectorJson/tolerationJson (a sweep unit's GPU placement from a step's output)",
        (2, 14, 0),
        "assumed: the driver reads nodeSelectorJson/tolerationJson since #11770 (2.5.0) and takes a toleration "
        "list since #11860 (merged April 2025); the first release with both was not pinned down, 2.14.0 is a "
        "conservative guess; older backends reject the fields or fail to read the list",
        "the static GPU node selector and toleration beside them (a served model's unit then waits for the GPU pool)",
        True,
        lambda s, p: any(_dynamic_placement(e) for e in _executors(p)),
    ),
    Feature(
        "pvcMount",
        (2, 0, 0),
        "assumed: mount_pvc came with the first kfp-kubernetes (1.0, 2023) and 2.0 backends; not checked release by release",
        "",
        True,
        lambda s, p: any("pvcMount" in e for e in _executors(p)),
    ),
    Feature(
        "emptyDirMounts (/dev/shm)",
        (2, 3, 0),
        "assumed: backend support merged mid-2024 (#10913), after 2.2.0",
        "",
        True,
        lambda s, p: any("emptyDirMounts" in e for e in _executors(p)),
    ),
    Feature(
        "retryPolicy",
        (2, 5, 0),
        "assumed: #9950 reports set_retry ignored on 2.2.0; retries are tested from 2.5.0 (#11836)",
        "",
        False,
        lambda s, p: any("retryPolicy" in t for t in _tasks(s)),
    ),
    Feature(
        "resourceCpuLimit/resourceMemoryLimit (string resources)",
        (2, 5, 0),
        "2.5.0 release notes: input parameterization for k8s resources, #11770 (ignored before, #11500)",
        "cpuLimit/memoryLimit numbers, which the compiler writes beside them (#11839)",
        False,
        lambda s, p: any("resourceCpuLimit" in (c.get("resources") or {}) for c in _containers(s)),
    ),
    Feature(
        "resources from pipeline values (the sweeps' per-model gpus/cpu/memory; before it their pods request no GPU)",
        (2, 5, 0),
        "2.5.0 release notes: input parameterization for k8s resources, #11770; the compiler writes no "
        "numeric value beside a placeholder",
        "",
        False,
        lambda s, p: any("{{$" in str(v) for c in _containers(s) for v in _resource_values(c)),
    ),
)


def _dynamic_placement(executor: dict) -> bool:
    """Whether an executor reads its node selector or a toleration from a pipeline value (JSON reference)."""
    return "nodeSelectorJson" in (executor.get("nodeSelector") or {}) or any(
        "tolerationJson" in t for t in executor.get("tolerations") or []
    )


def _resource_values(container: dict) -> list:
    resources = container.get("resources") or {}
    return [*resources.values(), *(resources.get("accelerator") or {}).values()]


def parse_version(text: str) -> Version | None:
    """`2.5.0`, `v2.5.0`, `2.14.3-rc.1` -> (2, 5, 0) ...; anything else (`unknown`, '') -> None."""
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", (text or "").strip())
    return (int(m[1]), int(m[2]), int(m[3] or 0)) if m else None


def required_features(spec: dict, platform: dict) -> list[Feature]:
    """The FEATURES a compiled pipeline (pipeline spec, platform spec) uses."""
    return [f for f in FEATURES if f.used_by(spec, platform)]


def minimum_backend(spec: dict, platform: dict) -> Version:
    """The first KFP backend release that runs every field of this compiled pipeline as written."""
    return max((f.since for f in required_features(spec, platform) if f.rejected), default=(2, 0, 0))


def compat_platform_spec(platform: dict) -> dict:
    """A copy of the platform spec without the fields that have an older equivalent (module doc)."""
    import copy

    out = copy.deepcopy(platform)
    for executor in _executors(out):
        executor.pop("securityContext", None)
        # placement from a step's output -> the static GPU selector and toleration kept beside it
        selector = executor.get("nodeSelector") or {}
        selector.pop("nodeSelectorJson", None)
        if "nodeSelector" in executor and not selector.get("labels"):
            executor.pop("nodeSelector")
        if "tolerations" in executor:
            kept = [{k: v for k, v in tol.items() if k != "tolerationJson"} for tol in executor["tolerations"]]
            executor["tolerations"] = [tol for tol in kept if tol]
        secrets = [x for x in executor.get("secretAsEnv") or [] if x.get("optional") is not True]
        for secret in secrets:
            secret.pop("secretNameParameter", None)
            secret.pop("optional", None)
        if "secretAsEnv" in executor:
            executor["secretAsEnv"] = secrets
    return out


def compat_notes(platform: dict) -> list[str]:
    """What `compat_platform_spec` leaves out that a step may miss: optional secrets (`optional:
    true`, e.g. the Hugging Face token) have no older form, so they are not passed at all; a sweep
    unit's placement from a step's output falls back to the static GPU pool."""
    names = sorted(
        {
            f"{x.get('secretName', '?')} ({', '.join(k['envVar'] for k in x.get('keyToEnv', []))})"
            for x in _secrets(platform)
            if x.get("optional") is True
        }
    )
    notes = [
        f"--compat leaves out the optional secret {n}: older backends cannot mark a secret optional "
        + (
            "(a served model that needs an API key then refuses the steps)"
            if "OPENAI_API_KEY" in n
            else "(a gated hub model then fails to download)"
        )
        for n in names
    ]
    if any(_dynamic_placement(e) for e in _executors(platform)):
        notes.append(
            "--compat places every sweep unit on the GPU pool: older backends cannot read a node selector or "
            "tolerations from a step, so a served model's unit (gpus: 0) waits for a GPU node too"
        )
    return notes


def check_backend(version_text: str, spec: dict, platform: dict, host: str, compat: bool) -> str:
    """Raise ConfigError when the backend at `host` (its healthz `tag_name`) is older than a field of
    the compiled pipeline needs; the message names each field and version and says whether
    `--compat` would help. Returns a warning line ('' when all is well), e.g. for a server that does
    not report its version."""
    version = parse_version(version_text)
    used = [f for f in required_features(spec, platform) if f.rejected]
    if version is None:
        need = ".".join(map(str, max((f.since for f in used), default=(2, 0, 0))))
        return (
            f"warning: {host} does not report its Kubeflow Pipelines version (healthz tag_name "
            f"{version_text or 'missing'!r}); this pipeline needs {need} or newer (k8s/README.md)"
        )
    too_new = [f for f in used if f.since > version]
    ignored = [f for f in required_features(spec, platform) if not f.rejected and f.since > version]
    if too_new:
        have = ".".join(map(str, version))
        fields = "; ".join(f"{f.name} needs {f.since_text}" for f in too_new)
        fixable = all(f.older for f in too_new)
        base = compat_platform_spec(platform)
        compat_need = ".".join(map(str, minimum_backend(spec, base)))
        if compat:
            hint = "upgrade Kubeflow Pipelines (k8s/README.md lists each field's version)"
        elif fixable and minimum_backend(spec, base) <= version:
            hint = f"pass --compat to compile without them (needs {compat_need}), or upgrade Kubeflow Pipelines"
        else:
            hint = f"upgrade Kubeflow Pipelines (--compat still needs {compat_need})"
        raise ConfigError(f"Kubeflow Pipelines {have} at {host} is too old for this pipeline: {fields}; {hint}")
    if ignored:
        return f"warning: Kubeflow Pipelines {'.'.join(map(str, version))} at {host} ignores " + "; ".join(
            f"{f.name} (honoured from {f.since_text})" for f in ignored
        )
    return ""


def load_compiled(path: str) -> tuple[dict, dict, list[Any]]:
    """(pipeline spec, platform spec, all YAML documents) of a file written by kfp's compiler.

    kfp writes one document, or two (pipeline spec, then `platforms:`) when a platform spec exists."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d is not None]
    spec = docs[0]
    platform = next(
        (d for d in docs[1:] if "platforms" in d), {"platforms": spec.get("platforms")} if "platforms" in spec else {}
    )
    return spec, platform, docs


def write_compat(path: str) -> list[str]:
    """Rewrite a compiled pipeline file in place without the fields `compat_platform_spec` drops;
    returns `compat_notes` (what a step may miss)."""
    import yaml

    spec, platform, docs = load_compiled(path)
    if not platform:
        return []
    new = compat_platform_spec(platform)
    if "platforms" in spec:
        spec["platforms"] = new["platforms"]
    else:
        docs = [spec] + [new if "platforms" in d else d for d in docs[1:]]
    header = _header(path)  # kfp's comment header (pipeline name, inputs) is lost on a re-dump
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(header + yaml.safe_dump_all(docs, sort_keys=False))
    return compat_notes(platform)


def _header(path: str) -> str:
    lines = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.startswith("#"):
                break
            lines.append(line)
    return (
        "".join(lines)
        + "# --compat: compiled without fields older Kubeflow Pipelines backends reject (pipelines/kfp_compat.py)\n"
    )
