"""Cluster placement of steps: GPU requests, node selector, tolerations, secrets, retries.

CPU steps (data build, report, bookkeeping) never request an accelerator. GPU steps request
`CONFIG.accelerator` x `CONFIG.gpu_count`, select the GPU node pool and tolerate its taint, and
retry (preemptible nodes). Every step that talks to MLflow or S3 gets its credentials from the
Kubernetes secrets named in `components.config` as environment variables, never as parameters.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Iterator

from kfp import kubernetes
from kfp.dsl import PipelineTask

from components.config import ClusterConfig, cluster_config

MLFLOW_SECRET_KEYS = {"MLFLOW_TRACKING_USERNAME": "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD": "MLFLOW_TRACKING_PASSWORD"}
S3_SECRET_KEYS = {"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"}
GPU_RETRIES = 2  # on a cluster: preemptible GPU nodes
# Set while a pipeline is built: the cluster settings, and whether it is for the local runner (no
# retries there: a local run fails fast instead of backing off for minutes).
_BUILD: contextvars.ContextVar[tuple[ClusterConfig, bool] | None] = contextvars.ContextVar("factprobe_build", default=None)


@contextmanager
def building(local: bool = False) -> Iterator[ClusterConfig]:
    """Build pipelines inside this block: the environment is read once, here (components.config)."""
    config = cluster_config()
    token = _BUILD.set((config, local))
    try:
        yield config
    finally:
        _BUILD.reset(token)


def _settings() -> tuple[ClusterConfig, bool]:
    return _BUILD.get() or (cluster_config(), False)


def with_secrets(task: PipelineTask, s3: bool = True) -> PipelineTask:
    """Credentials from Kubernetes secrets as env vars (MLflow always, S3 when the step reads/writes S3)."""
    CONFIG, _ = _settings()
    kubernetes.use_secret_as_env(task, secret_name=CONFIG.mlflow_secret, secret_key_to_env=MLFLOW_SECRET_KEYS)
    if s3:
        kubernetes.use_secret_as_env(task, secret_name=CONFIG.s3_secret, secret_key_to_env=S3_SECRET_KEYS)
    kubernetes.add_pod_label(task, "factprobe.io/role", "pipeline-step")
    # The images run as UID 1000 (containers/); KFP's launcher writes artifacts as that user.
    kubernetes.set_security_context(task, run_as_user=1000, run_as_group=1000, run_as_non_root=True)
    if CONFIG.s3_endpoint:
        task.set_env_variable("AWS_ENDPOINT_URL", CONFIG.s3_endpoint)
    return task


def cpu_step(task: PipelineTask, cpu: str = "1", memory: str = "4G", s3: bool = True, cache: bool = False) -> PipelineTask:
    """A CPU-only step: requests and limits, secrets, no accelerator."""
    task.set_container_image(_settings()[0].cpu_image)
    task.set_cpu_request(cpu).set_cpu_limit(cpu).set_memory_request(memory).set_memory_limit(memory)
    task.set_caching_options(cache)
    return with_secrets(task, s3=s3)


def gpu_step(task: PipelineTask, cpu: str = "4", memory: str = "32G") -> PipelineTask:
    """A GPU step on the GPU node pool, retried on preemption (not in local builds)."""
    CONFIG, local = _settings()
    task.set_container_image(CONFIG.gpu_image)
    task.set_accelerator_type(CONFIG.accelerator).set_accelerator_limit(CONFIG.gpu_count)
    task.set_cpu_request(cpu).set_cpu_limit(cpu).set_memory_request(memory).set_memory_limit(memory)
    key, value = CONFIG.gpu_node_label
    kubernetes.add_node_selector(task, label_key=key, label_value=value)
    tkey, tvalue, effect = CONFIG.gpu_toleration
    kubernetes.add_toleration(task, key=tkey, operator="Equal", value=tvalue, effect=effect)
    if not local:
        task.set_retry(num_retries=GPU_RETRIES, backoff_duration="60s", backoff_factor=2.0)
    task.set_caching_options(False)
    return with_secrets(task, s3=True)
