"""SLURM: cluster profiles, submission through submitit, sweeps as job arrays, status, resume, collect.

profiles      cluster profiles (YAML) and their search path       sweep_spec    --sweep / --sweep-file -> points
sweep_check   every point checked before anything is submitted    sweep_record  sweep.yaml and the sweep dir layout
executor      profile -> submitit SlurmExecutor / sbatch script   submission    submit a run, a sweep, a set of points
job           what the job runs (run_recorded on its run dir)     cluster_info  MaxArraySize from scontrol
targets       a sweep dir or a run dir, opened                    tracking      states from one sacct call
collect       results.csv / results.md                            resume        resubmit failed/missing points
cancel        scancel of what may still run                       follow        submit --wait
requeue       scontrol requeue after a stop signal (the runner's)
"""
