"""One GpuValidation's controller: its loop (controller), its children taken in (ingest), its run
driven tick by tick (driver), its reports created (reports), its status written (statuswriter),
its node actions kept within the breaker (runbreaker), the phases it drives, each in its folder:
the fabric (fabric: driver, settling, evidence) and the baselines (baseline: driver), and the
repair loop (repair: keeper, objects, withdraw). The drivers live here, above the state they
drive (run, fabric, baseline), so no wing below imports back up.
"""
