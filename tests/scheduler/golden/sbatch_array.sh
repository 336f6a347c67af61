#!/bin/bash
# hpc-runner: sweep points 0-11 of /scratch/sweeps/s1; training of /scratch/bundles/b

# Parameters
#SBATCH --account=proj-1
#SBATCH --array=0-11%12
#SBATCH --chdir=/scratch/sweeps/s1
#SBATCH --cpus-per-task=5
#SBATCH --dependency=afterok:123
#SBATCH --error=/scratch/sweeps/s1/jobs/%A/%A_%a_0_log.err
#SBATCH --exclude=gpu7
#SBATCH --export=ALL,PYTHONUNBUFFERED=1
#SBATCH --gpus-per-node=1
#SBATCH --hold
#SBATCH --job-name=my_bundle__v2_
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --mail-type=END
#SBATCH --mem=32GB
#SBATCH --nodes=1
#SBATCH --open-mode=append
#SBATCH --output=/scratch/sweeps/s1/jobs/%A/%A_%a_0_log.out
#SBATCH --partition=small
#SBATCH --requeue
#SBATCH --signal=USR2@120
#SBATCH --time=1-00:00:00

# setup
module load cuda/12.1

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /scratch/sweeps/s1/jobs/%A/%A_%a_%t_log.out --error /scratch/sweeps/s1/jobs/%A/%A_%a_%t_log.err --cpu-bind=cores --cpus-per-task=5 /opt/venv/bin/python -u -m submitit.core._submit /scratch/sweeps/s1/jobs/%A
