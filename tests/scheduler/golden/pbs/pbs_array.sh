#!/bin/bash
# by hand: hpc-runner job /scratch/sweeps/s1/jobs/array-0123456789ab.json --task 0  # tasks 0-3
#PBS -N hpcr-sweep
#PBS -q gpu
#PBS -A rad-ai
#PBS -P p123
#PBS -l select=1:ncpus=8:ngpus=1:mem=32gb
#PBS -l walltime=02:00:00
#PBS -l place=scatter:excl
#PBS -r y
#PBS -J 0-3
#PBS -W max_run_subjobs=2
#PBS -W depend=afterok:1234.pbs01:1235[].pbs01
#PBS -o /scratch/sweeps/s1/logs/
#PBS -e /scratch/sweeps/s1/logs/

cd /scratch/sweeps/s1
exec /opt/venv/bin/python -u -m hpc_runner job /scratch/sweeps/s1/jobs/array-0123456789ab.json
