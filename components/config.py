"""Component images and cluster scheduling defaults, read when a pipeline is built (never at import).

- `FACTPROBE_IMAGE_CPU` / `FACTPROBE_IMAGE_GPU`: container images (containers/README.md says how
  to build and tag them). Defaults: ghcr.io/factprobe/factprobe-{cpu,gpu}:<package version>.
- `FACTPROBE_GPU_NODE_LABEL` (`key=value`, default `factprobe.io/node-pool=gpu`): node selector
  of GPU steps.
- `FACTPROBE_GPU_TOLERATION` (`key=value:Effect`, default `nvidia.com/gpu=present:NoSchedule`).
- `FACTPROBE_GPU_ACCELERATOR` (default `nvidia.com/gpu`), `FACTPROBE_GPU_COUNT` (default 1).
- Secrets (never parameters): `mlflow-credentials` (MLFLOW_TRACKING_USERNAME/PASSWORD) and
  `s3-credentials` (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), overridable with
  `FACTPROBE_MLFLOW_SECRET` / `FACTPROBE_S3_SECRET`.
- `FACTPROBE_S3_ENDPOINT`: S3-compatible endpoint (MinIO) set as AWS_ENDPOINT_URL on every step.
- `FACTPROBE_IMAGE_TRAIN`: the training image (DeepSpeed, CUDA development headers) of the
  fine-tuning step; default ghcr.io/factprobe/factprobe-train:<package version>.
- `FACTPROBE_PVC` (default `factprobe-cache`, the claim of k8s/components/model-cache-pvc; empty:
  no volume) mounted at `FACTPROBE_PVC_MOUNT` (default `/mnt/factprobe`) on every step that
  loads a model or resumes: the model cache, the probes' working folders and checkpoints.
- `FACTPROBE_HF_SECRET` (default `hf-token`, key `HF_TOKEN`, optional): the Hugging Face token
  for gated hub models. `FACTPROBE_SHM_SIZE` (default `16Gi`): the memory-backed /dev/shm of
  training steps.
- `FACTPROBE_SERVED_KEY_SECRET` (default `vllm-api-key`, key `VLLM_API_KEY`, optional): the API key of a
  served model's endpoint (k8s/overlays/vllm-serve), given to the steps that load a model as
  FACTPROBE_OPENAI_API_KEY.
"""

import os
from dataclasses import dataclass

VERSION = "0.1.0"


@dataclass(frozen=True)
class ClusterConfig:
    cpu_image: str
    gpu_image: str
    gpu_node_label: tuple[str, str]
    gpu_toleration: tuple[str, str, str]  # key, value, effect
    accelerator: str
    gpu_count: int
    mlflow_secret: str
    s3_secret: str
    s3_endpoint: str  # '' for AWS S3; e.g. http://minio.factprobe.svc.cluster.local:9000 for MinIO
    train_image: str = ""  # the fine-tuning image (containers/Dockerfile.train)
    pvc_name: str = ""  # claim holding the model cache and working folders; '' = none
    pvc_mount: str = "/mnt/factprobe"
    hf_secret: str = "hf-token"
    shm_size: str = "16Gi"
    served_key_secret: str = "vllm-api-key"


def _pair(text: str, name: str) -> tuple[str, str]:
    if "=" not in text:
        raise ValueError(f"{name} must look like key=value, got {text!r}")
    k, v = text.split("=", 1)
    return k.strip(), v.strip()


def cluster_config() -> ClusterConfig:
    """Current configuration from the environment (validated; raises ValueError naming the variable)."""
    env = os.environ.get
    tol = env("FACTPROBE_GPU_TOLERATION", "nvidia.com/gpu=present:NoSchedule")
    if ":" not in tol:
        raise ValueError(f"FACTPROBE_GPU_TOLERATION must look like key=value:Effect, got {tol!r}")
    kv, effect = tol.rsplit(":", 1)
    k, v = _pair(kv, "FACTPROBE_GPU_TOLERATION")
    if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise ValueError(f"FACTPROBE_GPU_TOLERATION effect must be NoSchedule, PreferNoSchedule or NoExecute, got {effect!r}")
    count = env("FACTPROBE_GPU_COUNT", "1")
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"FACTPROBE_GPU_COUNT must be a positive integer, got {count!r}")
    return ClusterConfig(
        cpu_image=env("FACTPROBE_IMAGE_CPU", CPU_IMAGE),
        gpu_image=env("FACTPROBE_IMAGE_GPU", GPU_IMAGE),
        gpu_node_label=_pair(env("FACTPROBE_GPU_NODE_LABEL", "factprobe.io/node-pool=gpu"), "FACTPROBE_GPU_NODE_LABEL"),
        gpu_toleration=(k, v, effect),
        accelerator=env("FACTPROBE_GPU_ACCELERATOR", "nvidia.com/gpu"),
        gpu_count=int(count),
        mlflow_secret=env("FACTPROBE_MLFLOW_SECRET", "mlflow-credentials"),
        s3_secret=env("FACTPROBE_S3_SECRET", "s3-credentials"),
        s3_endpoint=env("FACTPROBE_S3_ENDPOINT", ""),
        train_image=env("FACTPROBE_IMAGE_TRAIN", TRAIN_IMAGE),
        pvc_name=env("FACTPROBE_PVC", "factprobe-cache").strip(),
        pvc_mount=_mount(env("FACTPROBE_PVC_MOUNT", "/mnt/factprobe")),
        hf_secret=env("FACTPROBE_HF_SECRET", "hf-token"),
        shm_size=env("FACTPROBE_SHM_SIZE", "16Gi"),
        served_key_secret=env("FACTPROBE_SERVED_KEY_SECRET", "vllm-api-key"),
    )


def _mount(path: str) -> str:
    if not path.startswith("/") or path.rstrip("/") in ("", "/dev", "/proc", "/sys"):
        raise ValueError(f"FACTPROBE_PVC_MOUNT must be an absolute folder such as /mnt/factprobe, got {path!r}")
    return path.rstrip("/")


# The images the components are declared with. Nothing is read from the environment at import:
# pipelines/platform.py sets every task's image from `cluster_config()` when a pipeline is built.
CPU_IMAGE = f"ghcr.io/factprobe/factprobe-cpu:{VERSION}"
GPU_IMAGE = f"ghcr.io/factprobe/factprobe-gpu:{VERSION}"
TRAIN_IMAGE = f"ghcr.io/factprobe/factprobe-train:{VERSION}"

IMAGE_SETTINGS = {"cpu_image": "FACTPROBE_IMAGE_CPU", "gpu_image": "FACTPROBE_IMAGE_GPU", "train_image": "FACTPROBE_IMAGE_TRAIN"}
DEFAULT_IMAGES = {"cpu_image": CPU_IMAGE, "gpu_image": GPU_IMAGE, "train_image": TRAIN_IMAGE}
#: the pipelines whose steps run the training image
TRAINING_PIPELINES = ("finetune_known_unknown",)


def default_image_settings(config: ClusterConfig, training: bool = True) -> list[str]:
    """The image settings (env names) still at their built-in default: images under
    ghcr.io/factprobe that are not published, so a cluster cannot pull them. `training=False`
    leaves out the training image (a pipeline without fine-tuning steps never pulls it)."""
    return [
        env
        for field, env in IMAGE_SETTINGS.items()
        if (training or field != "train_image") and getattr(config, field) == DEFAULT_IMAGES[field]
    ]
