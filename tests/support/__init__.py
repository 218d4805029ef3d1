"""Helpers the tests share (fleets of real agent results, a headless browser): not product code."""
