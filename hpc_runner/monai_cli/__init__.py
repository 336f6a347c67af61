"""MONAI's bundle subcommands (``python -m monai.bundle NAME``) that hpc-runner runs with the same arguments.

``spec`` describes each command's arguments (standard library only: ``hpc-runner --help`` stays light);
``arguments`` merges them with ``--args_file`` as MONAI does; ``commands`` runs one here; ``job`` and
``submit`` run one as a SLURM job. The work itself lives in ``hpc_runner.export`` (ckpt_export,
onnx_export), ``hpc_runner.registry`` (init_bundle) and here: ``verify_metadata``, ``verify_net_in_out``
and ``workflow`` (run_workflow).
"""
