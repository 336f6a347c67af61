#!/bin/bash
# hpc-runner: sweep points 0-3 of /scratch/sweeps/s1; training of /scratch/bundles/b
# by hand: hpc-runner job /scratch/sweeps/s1/jobs/array-ID.json --task 0  # tasks 0-3

# Parameters
#SBATCH --account=proj-1
#SBATCH --array=0-3%4
#SBATCH --chdir=/scratch/sweeps/s1
#SBATCH --cpus-per-task=5
#SBATCH --error=/scratch/sweeps/s1/jobs/%A_%a_0_log.err
#SBATCH --export=ALL,PYTHONUNBUFFERED=1
#SBATCH --gpus-per-node=1
#SBATCH --job-name=my_bundle__v2_
#SBATCH --mail-type=END
#SBATCH --mem=32GB
#SBATCH --nodes=1
#SBATCH --open-mode=append
#SBATCH --output=/scratch/sweeps/s1/jobs/%A_%a_0_log.out
#SBATCH --partition=small
#SBATCH --requeue
#SBATCH --signal=USR2@120
#SBATCH --time=1-00:00:00

# setup
module load cuda/12.1

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /scratch/sweeps/s1/jobs/%A_%a_%t_log.out --error /scratch/sweeps/s1/jobs/%A_%a_%t_log.err --cpu-bind=cores --cpus-per-task=5 /opt/venv/bin/python -u -m hpc_runner job /scratch/sweeps/s1/jobs/array-ID.json
