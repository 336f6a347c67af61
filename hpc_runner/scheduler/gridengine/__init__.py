"""Grid Engine (Son of Grid Engine 8.1.9, Open Cluster Scheduler, Altair/Univa Grid Engine), run for real.

One folder, as for every backend: ``settings.py`` (a profile's ``gridengine:`` requests in Grid Engine's words),
``job_script.py`` (the ``#$`` script, proven), ``answers.py`` (pure parsers: ``qsub -terse``, ``qstat -xml``,
``qacct -j``, ``qconf -sconf``/``-sq`` into our ``JobStatus``, ``Usage`` and limits), ``commands.py`` (the argv
lists and the one place they run), ``executor.py`` (the ``Executor``), ``job_side.py`` (the job's variables:
``JOB_ID``, ``SGE_TASK_ID``, ``NSLOTS``, ``PE_HOSTFILE``, ``TMPDIR``; requeue by exit 99) and ``job_call.py`` (its part
of what a job runs, ``python -m hpc_runner.scheduler.job_call FILE.json``: a MemoryError as exit 137).

Tested on a real Grid Engine (``scripts/local-sge.sh start``; tests/gridengine/) and against answers recorded
from it (tests/scheduler/golden/gridengine/, ``record.sh`` there). docs/schedulers.md says what it supports.
"""
