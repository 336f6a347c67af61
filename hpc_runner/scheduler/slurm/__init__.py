"""SLURM: the executor (sbatch scripts, proven; sacct and squeue; submit limits; scancel) and what a job asks
SLURM about itself (requeue, its end time, node lists)."""
