"""The baselines carried out (spec.baseline): the driver that lists GpuBaselines, keeps each
report's history and learns (driver). The pure decisions it follows are gpuval_operator.baseline's
and gpuval_api.baseline's."""
