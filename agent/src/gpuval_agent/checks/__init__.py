"""The checks: verdicts, thresholds and diagnoses, shared by every backend."""
