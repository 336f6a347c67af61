"""See the results: plots and a self-contained HTML page for a run or a sweep, live sweep progress, re-runs.

One run's page and the helpers of every page are in ``hpc_runner.pages`` (below tracking, which uploads it).

Nothing here imports matplotlib, torch or monai at import time; the plotting modules import
matplotlib (Agg canvas, no pyplot) inside their functions.
"""
