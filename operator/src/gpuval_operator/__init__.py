"""gpuval operator: reconciles GpuValidation into agent pods and GpuNodeReports."""
