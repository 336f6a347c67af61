"""hpc-runner: run MONAI-format bundles on a laptop or on SLURM clusters."""

__version__ = "0.1.0"
