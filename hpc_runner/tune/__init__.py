"""Model-based sweeps with pruning (``hpc-runner tune``): Optuna's samplers and pruners on a sweep dir.

space.py parses ``--space`` options, study.py opens the Optuna study on the sweep dir's journal file,
worker.py is what each worker array task runs (ask, run the trial with exact resume, report, tell).
"""
