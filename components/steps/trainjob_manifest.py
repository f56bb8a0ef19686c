"""Multi-node fine-tuning through Kubeflow Trainer (v2): the `TrainJob` a KFP step creates.

One setting of `finetune_known_unknown` trained on several GPU nodes: the step builds a
`trainer.kubeflow.org/v1alpha1` TrainJob with the `kubeflow` SDK's models
(`kubeflow_trainer_api`, generated from the Trainer CRD's OpenAPI schema), and either creates it
(`kubeflow.trainer.TrainerClient`'s Kubernetes API, in the pipeline namespace) or only writes the
manifest it would submit (`submit=False`, the default: a cluster without Kubeflow Trainer still
gets the file to `kubectl apply`).

The TrainJob:
- `runtimeRef`: the ClusterTrainingRuntime `torch-distributed` (Kubeflow Trainer's default for
  PyTorch; its torch plugin sets PET_NNODES / PET_NPROC_PER_NODE / PET_NODE_RANK /
  PET_MASTER_ADDR, which torchrun reads);
- `trainer`: the training image, `num_nodes` nodes x `gpus_per_node` processes, resources per
  node (GPUs, CPU, memory), and the command
  `torchrun -m factprobe.cli finetune <every FinetuneConfig option>`, the same trainer the
  single-node step runs (DeepSpeed picks up the torchrun environment; `--out` is on the PVC so
  every node writes checkpoints where a restarted job resumes);
- `runtimePatches` (manager `factprobe.io/pipeline`): on the `node` replicated job's pods, the GPU
  node pool's node selector and toleration, the model cache PVC, /dev/shm as a memory-backed
  emptyDir, the pod label the NetworkPolicies admit, the non-root security context, and on the
  `node` container the volume mounts, the storage environment and the MLflow credentials and
  HF_TOKEN from their Secrets.

`validate_trainjob(manifest)` checks a manifest against the SDK's models (unknown or mistyped
fields fail: the manifest must survive a parse and re-serialisation unchanged) and checks the pod
parts (volumes, tolerations, env, mounts, resources) with `kubernetes-validate` as a Pod of the
oldest supported Kubernetes version.
"""

from __future__ import annotations

import copy
from typing import Any

from factprobe_ops.components.config import ClusterConfig

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "TrainJob"
TRAINER_RUNTIME = "torch-distributed"
NODE = "node"  # the replicated job and container of Kubeflow Trainer's torch runtime
MANAGER = "factprobe.io/pipeline"
K8S_VERSION = "1.29.0"


def finetune_args(ft: dict[str, Any]) -> list[str]:
    """`factprobe finetune` options for a FinetuneConfig dict (None left out, bools as
    `--x` / `--no-x`, lists comma-joined), validated by `FinetuneConfig.from_dict` first."""
    from factprobe.finetune import FinetuneConfig

    cfg = FinetuneConfig.from_dict(ft)
    args: list[str] = []
    for name, value in cfg.to_dict().items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(map(str, value))]
        else:
            args += [flag, str(value)]
    return args


def _secret_env(name: str, secret: str, key: str, optional: bool = False) -> dict:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": optional}}}


def trainjob_manifest(
    name: str,
    ft: dict[str, Any],
    cluster: ClusterConfig,
    num_nodes: int = 2,
    gpus_per_node: int | None = None,
    cpu: str = "8",
    memory: str = "64G",
    tracking_uri: str = "",
    labels: dict[str, str] | None = None,
) -> dict:
    """The TrainJob (a plain dict, as `kubectl apply` and the Kubernetes API take it) that trains
    `ft` (a FinetuneConfig dict; its `out` should be on the PVC) on `num_nodes` nodes of the GPU
    pool with `gpus_per_node` GPUs each (default: the cluster setting's GPU count). Built with the
    SDK's models, so a field the CRD does not have cannot be written."""
    from kubeflow_trainer_api import models as m

    if num_nodes < 1:
        raise ValueError(f"num_nodes={num_nodes}: must be >= 1")
    gpus = int(gpus_per_node or cluster.gpu_count)
    mount = cluster.pvc_mount
    env = [
        m.IoK8sApiCoreV1EnvVar(name="FACTPROBE_CACHE", value=f"{mount}/cache"),
        m.IoK8sApiCoreV1EnvVar(name="FACTPROBE_WORK", value=f"{mount}/work"),
        m.IoK8sApiCoreV1EnvVar(name="HF_HOME", value=f"{mount}/hf"),
        m.IoK8sApiCoreV1EnvVar(name="TORCH_EXTENSIONS_DIR", value=f"{mount}/torch_extensions"),
    ]
    if tracking_uri:
        env.append(m.IoK8sApiCoreV1EnvVar(name="MLFLOW_TRACKING_URI", value=tracking_uri))
    if cluster.s3_endpoint:
        env.append(m.IoK8sApiCoreV1EnvVar(name="AWS_ENDPOINT_URL", value=cluster.s3_endpoint))
    secret_env = [
        _secret_env("MLFLOW_TRACKING_USERNAME", cluster.mlflow_secret, "MLFLOW_TRACKING_USERNAME"),
        _secret_env("MLFLOW_TRACKING_PASSWORD", cluster.mlflow_secret, "MLFLOW_TRACKING_PASSWORD"),
        _secret_env("AWS_ACCESS_KEY_ID", cluster.s3_secret, "AWS_ACCESS_KEY_ID"),
        _secret_env("AWS_SECRET_ACCESS_KEY", cluster.s3_secret, "AWS_SECRET_ACCESS_KEY"),
        _secret_env("HF_TOKEN", cluster.hf_secret, "HF_TOKEN", optional=True),
    ]
    env += [m.IoK8sApiCoreV1EnvVar.from_dict(e) for e in secret_env]
    volumes = [
        m.IoK8sApiCoreV1Volume.from_dict({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": cluster.shm_size}})
    ]
    mounts = [m.IoK8sApiCoreV1VolumeMount(name="dshm", mountPath="/dev/shm")]
    if cluster.pvc_name:
        volumes.append(
            m.IoK8sApiCoreV1Volume.from_dict(
                {"name": "factprobe-cache", "persistentVolumeClaim": {"claimName": cluster.pvc_name}}
            )
        )
        mounts.append(m.IoK8sApiCoreV1VolumeMount(name="factprobe-cache", mountPath=mount))
    key, value = cluster.gpu_node_label
    tkey, tvalue, effect = cluster.gpu_toleration
    pod = m.TrainerV1alpha1PodSpecPatch(
        nodeSelector={key: value},
        tolerations=[m.IoK8sApiCoreV1Toleration(key=tkey, operator="Equal", value=tvalue, effect=effect)],
        volumes=volumes,
        securityContext=m.IoK8sApiCoreV1PodSecurityContext(runAsUser=1000, runAsGroup=1000, runAsNonRoot=True),
        containers=[m.TrainerV1alpha1ContainerPatch(name=NODE, env=env, volumeMounts=mounts)],
    )
    patch = m.TrainerV1alpha1RuntimePatch(
        manager=MANAGER,
        trainingRuntimeSpec=m.TrainerV1alpha1TrainingRuntimeSpecPatch(
            template=m.TrainerV1alpha1JobSetTemplatePatch(
                spec=m.TrainerV1alpha1JobSetSpecPatch(
                    replicatedJobs=[
                        m.TrainerV1alpha1ReplicatedJobPatch(
                            name=NODE,
                            template=m.TrainerV1alpha1JobTemplatePatch(
                                spec=m.TrainerV1alpha1JobSpecPatch(
                                    template=m.TrainerV1alpha1PodTemplatePatch(
                                        metadata=m.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
                                            labels={"factprobe.io/role": "pipeline-step"}
                                        ),
                                        spec=pod,
                                    )
                                )
                            ),
                        )
                    ]
                )
            )
        ),
    )
    per_node = {cluster.accelerator: str(gpus), "cpu": cpu, "memory": memory}
    resources = m.IoK8sApiCoreV1ResourceRequirements.from_dict({"limits": per_node, "requests": dict(per_node)})
    trainer = m.TrainerV1alpha1Trainer(
        image=cluster.train_image,
        numNodes=num_nodes,
        numProcPerNode=gpus,
        resourcesPerNode=resources,
        command=["torchrun", "-m", "factprobe.cli", "finetune"],
        args=finetune_args(ft),
    )
    job = m.TrainerV1alpha1TrainJob(
        apiVersion=API_VERSION,
        kind=KIND,
        metadata=m.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
            name=name, labels={"app.kubernetes.io/part-of": "factprobe", **(labels or {})}
        ),
        spec=m.TrainerV1alpha1TrainJobSpec(
            runtimeRef=m.TrainerV1alpha1RuntimeRef(
                name=TRAINER_RUNTIME, kind="ClusterTrainingRuntime", apiGroup="trainer.kubeflow.org"
            ),
            trainer=trainer,
            runtimePatches=[patch],
        ),
    )
    return job.to_dict()


def validate_trainjob(manifest: dict) -> None:
    """Raise ValueError naming the problem when `manifest` is not a TrainJob the Trainer CRD
    accepts as far as the SDK's models and the Kubernetes schema of its pod parts can tell."""
    import kubernetes_validate
    from kubeflow_trainer_api import models as m
    from pydantic import ValidationError

    if manifest.get("apiVersion") != API_VERSION or manifest.get("kind") != KIND:
        raise ValueError(f"not a {API_VERSION} {KIND}: {manifest.get('apiVersion')} {manifest.get('kind')}")
    try:
        parsed = m.TrainerV1alpha1TrainJob.from_dict(copy.deepcopy(manifest))
    except ValidationError as e:
        first = e.errors()[0]
        raise ValueError(f"TrainJob field {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    again = parsed.to_dict()
    if again != manifest:
        raise ValueError(f"TrainJob has fields the Trainer API does not know: {_first_difference(manifest, again)}")
    name = manifest["metadata"].get("name", "")
    if not name or len(name) > 63 or not name.replace("-", "a").isalnum() or not name[0].isalpha() or name != name.lower():
        raise ValueError(
            f"TrainJob name {name!r}: must be a DNS-1035 label (lower-case letters, digits, '-', "
            f"starting with a letter, at most 63 characters)"
        )
    trainer = manifest["spec"].get("trainer", {})
    if trainer.get("numNodes", 1) < 1:
        raise ValueError(f"trainer.numNodes={trainer.get('numNodes')}: must be >= 1")
    from kubernetes.utils import parse_quantity

    for kind, values in (trainer.get("resourcesPerNode") or {}).items():
        for resource, quantity in values.items():
            try:
                parse_quantity(quantity)
            except ValueError:
                raise ValueError(
                    f"trainer.resourcesPerNode.{kind}.{resource}={quantity!r}: not a Kubernetes "
                    "quantity (e.g. 8, 500m, 64G, 16Gi)"
                ) from None
    for patch in manifest["spec"].get("runtimePatches", []):
        for rj in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            pod_patch = rj["template"]["spec"]["template"]
            spec = copy.deepcopy(pod_patch.get("spec", {}))
            containers = spec.pop("containers", [])
            container = next((c for c in containers if c["name"] == NODE), {"name": NODE})
            volumes = {v["name"] for v in spec.get("volumes", [])}
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in volumes:
                    raise ValueError(
                        f"TrainJob pod of {rj['name']}: container {NODE} mounts volume {mount['name']!r}, "
                        f"which the patch does not define ({', '.join(sorted(volumes)) or 'none'})"
                    )
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-check", "labels": pod_patch.get("metadata", {}).get("labels", {})},
                "spec": {
                    **spec,
                    "containers": [
                        {
                            **container,
                            "image": trainer.get("image", "x"),
                            "command": trainer.get("command", []),
                            "args": trainer.get("args", []),
                            "resources": trainer.get("resourcesPerNode", {}),
                        }
                    ],
                },
            }
            try:
                kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as e:
                raise ValueError(f"TrainJob pod of {rj['name']}: {e.message} at {'.'.join(map(str, e.path))}") from None


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in b:
            if k not in a:
                return f"{path}.{k} (missing: the API fills it in)".lstrip(".")
        for k in a:
            if k not in b:
                return f"{path}.{k}".lstrip(".")
            d = _first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return ""
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return "" if len(a) == len(b) else path
    return "" if a == b else f"{path} ({a!r} became {b!r})"


def submit_trainjob(manifest: dict, namespace: str) -> str:
    """Create the TrainJob in `namespace` with the Kubernetes API the `kubeflow` SDK uses (in-cluster
    credentials of the step's service account, which needs `create` on trainjobs). Returns its name."""
    from kubeflow.trainer.constants import constants
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    client.CustomObjectsApi().create_namespaced_custom_object(
        constants.GROUP, constants.VERSION, namespace, constants.TRAINJOB_PLURAL, manifest
    )
    return manifest["metadata"]["name"]
