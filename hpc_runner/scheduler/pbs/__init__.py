"""PBS Professional / OpenPBS, by its scripts: settings in PBS's words, the ``#PBS`` job script, the answers of
``qsub`` and ``qstat -f -F json -x`` parsed into our ``JobStatus`` and ``Usage``, ``qdel``, and the job side
(``PBS_*`` variables, ``qrerun``).

Not run here (there is no PBS on the development machine): tests/scheduler/test_pbs_lsf.py checks the scripts and
the parsed answers against golden files written from Altair's documentation, OpenPBS's sources and psij-python's
PBS executor (tests/scheduler/golden/pbs/README). docs/schedulers.md says so.
"""
