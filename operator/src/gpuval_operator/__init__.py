"""gpuval operator: reconciles GpuValidation into agent pods and GpuNodeReports.

The house, top down: `main` (kopf registrations) starts one `control` per GpuValidation, which
drives its `run` with the help of `nodes` and `fabric`, keeps the `readmodel` that /metrics
reads, and reaches the API server through `kube`. Beneath them all: `config`, `spec`,
`planning`, `names`, `timestamps`, `cron`; `rbac` is the one source of the rights the code needs.
docs/operator.md, "How it is built", names every module.
"""
