"""Helpers the tests share: talking to the real control plane, the chart, fleets of simulated
nodes and of real agent results, a headless browser. Fixtures stay in the conftest files;
everything here is plain functions, not product code."""
