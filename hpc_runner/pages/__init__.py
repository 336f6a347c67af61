"""One run's report: what its files say (rundata), where its time went (bottleneck), its plots and its
self-contained HTML page (run_report), and the page and figure helpers every report uses (page, figures).

Below tracking and the engine: the trainer writes the bottleneck into summary.json and tracking uploads
the page at the end of a run. The sweep, tune and status views built on these are in ``hpc_runner.report``.
Nothing here imports matplotlib, torch or monai at import time; the plotting functions import matplotlib.
"""
