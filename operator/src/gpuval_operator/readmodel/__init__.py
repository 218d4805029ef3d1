"""The read model: what the operator knows of each GpuValidation (validation), all of them
(registry), and the Prometheus metrics built from it at scrape time (metrics)."""
