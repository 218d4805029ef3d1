"""One GpuValidation's controller: its loop (controller), its children taken in (ingest), its run
driven tick by tick (driver), its reports created (reports), its status written (statuswriter),
its node actions kept within the breaker (runbreaker), and the phases it drives: the fabric
(fabricdriver, with fabricsettling and fabricevidence) and the baselines (baselinedriver). The
drivers live here, above the state they drive (run, fabric, baseline), so no wing below imports
back up.
"""
