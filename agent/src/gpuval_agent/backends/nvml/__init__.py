"""What the real backend reads from NVML (nvidia-ml-py): the environment record and live telemetry
(reader), the state check's reads (statecheck) and the MIG devices a GPU holds (mig)."""
