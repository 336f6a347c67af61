"""IBM Spectrum LSF, by its scripts: settings in LSF's words, the ``#BSUB`` job script, the answers of ``bsub``
and ``bjobs -o ... -json`` parsed into our ``JobStatus`` and ``Usage``, ``bkill``, and the job side (``LSB_*``
variables, ``brequeue`` or a ``-Q`` requeue exit value).

Not run here (there is no LSF on the development machine): tests/scheduler/test_pbs_lsf.py checks the scripts and
the parsed answers against golden files written from IBM's documentation and psij-python's LSF executor
(tests/scheduler/golden/lsf/README). docs/schedulers.md says so.
"""
