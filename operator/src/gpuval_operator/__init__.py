"""gpuval operator: reconciles GpuValidation into agent pods and GpuNodeReports.

The house, top down: `main` (kopf registrations) starts one `control` per GpuValidation, which
drives its run and the run's phases (its fabric and baseline drivers live in it), and keeps the
`readmodel` that /metrics reads. Every import runs down this order of the wings:

1. `main`
2. `control`: the controller, the run's driver, and the phase drivers it drives;
3. `readmodel`: what /metrics reads of every validation;
4. `nodes`: the selected nodes, their entries and the actions on them;
5. `remediation`: the repair loop's record, state machine, templates and the calls on the
   engine's objects (spec.remediation; its keeper is in `control`);
6. `run`: one run's state (`RunState`, which holds the fabric's and the baselines' states), the
   facts of its reports, its pure decisions and its API calls (`Effects`);
7. `fabric` and `baseline`, which import nothing of each other: each phase's state, facts and
   pure decisions;
8. `planning`, `kube`, `spec`, `podfacts` (an agent pod's facts, read by the run and the fabric),
   `capacity` (healthy capacity: each selected node's and GPU's state, pure);
9. the ground: `config`, `names`, `timestamps`, `cron`, `rbac`, the one source of the rights
   the code needs, `devices`, a node's GPUs and how a pod asks for them, and `proofage`, which
   nodes spec.maxProofAgeSeconds re-validates.

A wing uses what stands below it and never what stands above: state types sit below the code that
uses them, drivers where `control` drives them. `make lint` keeps this order (import-linter's
"operator-wings" contract in pyproject.toml); a new wing takes its place there.
docs/operator/architecture.md, "How it is built", names every module.
"""
