"""factprobe's operations layer, from the repository's top-level `components/`, `pipelines/` and `tracking/`
(pyproject.toml `package-dir` installs them here, so nothing generic lands at the top of site-packages): Kubeflow components (`factprobe_ops.components`), pipelines
(`factprobe_ops.pipelines`) and MLflow tracking (`factprobe_ops.tracking`).

One namespace beside the science package `factprobe`, which imports none of it (nor kfp, nor mlflow).
Installed with the extras: `pip install 'factprobe[kubeflow]'` (pipelines and components),
`'factprobe[tracking]'` (MLflow), or `'factprobe[all]'`. The command line finds these layers through
the `factprobe.commands` entry points, so `factprobe pipeline ...` and `factprobe runs ...` appear only
when they are installed.
"""
