"""See the results: plots and a self-contained HTML page for a run or a sweep, live sweep progress, re-runs.

Nothing here imports matplotlib, torch or monai at import time; the plotting modules import
matplotlib (Agg canvas, no pyplot) inside their functions.
"""
