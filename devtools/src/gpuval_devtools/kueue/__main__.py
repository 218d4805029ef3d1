"""``python -m gpuval_devtools.kueue``: build Kueue (or find it cached) and print its paths."""

from gpuval_devtools.kueue.build import main

raise SystemExit(main())
