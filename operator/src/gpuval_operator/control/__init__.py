"""One GpuValidation's controller: its loop (controller), its children taken in (ingest), its run
driven tick by tick (driver), its reports created (reports), its status written (statuswriter).
"""
