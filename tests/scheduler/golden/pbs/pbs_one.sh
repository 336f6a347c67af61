#!/bin/bash
# by hand: hpc-runner job /scratch/sweeps/s1/jobs/array-0123456789ab.json
#PBS -N hpcr-one
#PBS -q gpu
#PBS -A rad-ai
#PBS -P p123
#PBS -l select=1:ncpus=8:ngpus=1:mem=32gb
#PBS -l walltime=02:00:00
#PBS -l place=scatter:excl
#PBS -r y
#PBS -o /scratch/sweeps/s1/logs/
#PBS -e /scratch/sweeps/s1/logs/

# setup
module load cuda/12.2

cd /scratch/sweeps/s1
exec /opt/venv/bin/python -u -m hpc_runner job /scratch/sweeps/s1/jobs/array-0123456789ab.json
