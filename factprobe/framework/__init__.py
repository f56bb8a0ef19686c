"""The probe framework: what a probe is and what runs it, apart from the probes themselves.

As lm-evaluation-harness keeps `api/` apart from `tasks/`, this package holds the machinery every probe
goes through and no probe: the contract (`base.Probe`, `base.Session`; the data contract checked after
`prepare` in `contract`), the run configuration (`config.BaseConfig`, `config.RunConfig`), the one list of
probes (`registry`), the generic runner (`runner.run_probe`), its checkpoint and row stream (`checkpoint`,
`row_stream`), and what a probe declares for reports, gates and maps (`reporting`, `verdict`).
The instances, the built-in probes, live in `factprobe.probes` and plug in through `registry.register`.

Importing the package installs the registry as the run configuration's probe lookup
(`config.use_probes`): the registry sits above the configuration, so it is handed down, not imported up.
"""

from . import registry as _registry  # noqa: F401  (installs the probe lookup; see the docstring)
