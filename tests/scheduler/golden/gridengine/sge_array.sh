#!/bin/bash
# hpc-runner: sweep points 0-3 of /scratch/sweeps/s1
# by hand: hpc-runner job /scratch/sweeps/s1/logs/array-0123456789ab.json --task 0  # tasks 0-3
#$ -S /bin/bash
#$ -N hpcr-sweep-1
#$ -o /scratch/sweeps/s1/logs
#$ -e /scratch/sweeps/s1/logs
#$ -wd /scratch/sweeps/s1
#$ -V
#$ -r y
#$ -notify
#$ -t 1-4
#$ -tc 2
#$ -hold_jid 12,13
#$ -q all.q
#$ -pe smp 4
#$ -l h_rt=2:00:00,h_vmem=8G
#$ -P rad-ai
#$ -l gpu=1

# setup
module load cuda/12.2

exec /opt/venv/bin/python -u -m hpc_runner job /scratch/sweeps/s1/logs/array-0123456789ab.json
