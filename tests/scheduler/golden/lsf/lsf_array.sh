#!/bin/bash
# by hand: hpc-runner job /scratch/sweeps/s1/jobs/array-0123456789ab.json --task 0  # tasks 0-3
#BSUB -J "hpcr-sweep[1-4]%2"
#BSUB -q gpu
#BSUB -P rad-ai
#BSUB -n 8
#BSUB -R "span[hosts=1]"
#BSUB -R "rusage[mem=32GB]"
#BSUB -M 32GB
#BSUB -W 2:00
#BSUB -gpu num=1
#BSUB -Q 99
#BSUB -w "done(5678) && done(5683)"
#BSUB -o /scratch/sweeps/s1/logs/%J_%I.out
#BSUB -e /scratch/sweeps/s1/logs/%J_%I.err

cd /scratch/sweeps/s1
exec /opt/venv/bin/python -u -m hpc_runner job /scratch/sweeps/s1/jobs/array-0123456789ab.json
