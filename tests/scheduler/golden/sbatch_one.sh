#!/bin/bash

# Parameters
#SBATCH --account=proj-1
#SBATCH --cpus-per-task=5
#SBATCH --error=/scratch/runs/r1/jobs/%j/%j_0_log.err
#SBATCH --export=ALL,PYTHONUNBUFFERED=1
#SBATCH --gpus-per-node=1
#SBATCH --job-name=run
#SBATCH --mail-type=END
#SBATCH --mem=32GB
#SBATCH --nodes=1
#SBATCH --open-mode=append
#SBATCH --output=/scratch/runs/r1/jobs/%j/%j_0_log.out
#SBATCH --partition=small
#SBATCH --requeue
#SBATCH --signal=USR2@120
#SBATCH --time=1-00:00:00

# setup
module load cuda/12.1

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /scratch/runs/r1/jobs/%j/%j_%t_log.out --error /scratch/runs/r1/jobs/%j/%j_%t_log.err --cpu-bind=cores --cpus-per-task=5 /opt/venv/bin/python -u -m submitit.core._submit /scratch/runs/r1/jobs/%j
