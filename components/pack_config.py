"""KFP component. Step: the run-config dict of a cluster run, from its dict constant and the parameters that cannot sit in one (the logic is in components/steps/pack_config.py)."""

from typing import Optional  # kfp 2.17 reads Optional[X], not X | None (an "artifact type" error)

from kfp import dsl

from .config import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def pack_config(
    config: dict,
    present: list,
    relations: Optional[list] = None,  # noqa: UP045
    template_sources: Optional[list] = None,  # noqa: UP045
    shots: Optional[list] = None,  # noqa: UP045
    n: Optional[list] = None,  # noqa: UP045
    max_templates: Optional[int] = None,  # noqa: UP045
    max_candidates: Optional[int] = None,  # noqa: UP045
    grad_accum: Optional[int] = None,  # noqa: UP045
    train_size: Optional[int] = None,  # noqa: UP045
    choices: Optional[int] = None,  # noqa: UP045
) -> dict:
    """Return `config` with each parameter of `present` added: the pipeline's lists and its whole numbers that may be left empty (pipelines/params.py `packed`); an empty one is "not set"."""
    from factprobe_ops.components.steps.pack_config import pack

    given = {
        "relations": relations,
        "template_sources": template_sources,
        "shots": shots,
        "n": n,
        "max_templates": max_templates,
        "max_candidates": max_candidates,
        "grad_accum": grad_accum,
        "train_size": train_size,
        "choices": choices,
    }
    return pack(config, present, given)
