"""Helpers of the cluster tests: talking to the real control plane, the chart, a fleet of
simulated nodes. Fixtures stay in the conftest files; everything here is plain functions."""
