"""Where the states of jobs were read, in neutral names: the ``source`` of a scheduler's answer.

Callers above the scheduler (sweep status, reports, usage) compare and show these instead of naming
the scheduler's commands; what each name stands for is the backend's business (``SchedulerAnswer.words`` says
it for people). No record stores a source (status --json prints it, nothing reads it back), so earlier words
need no reader.
"""

from __future__ import annotations

# the scheduler's accounting: one call for every job, with each job's attempts, nodes and usage
FROM_ACCOUNTING = "accounting"
# the scheduler's queue, asked when the accounting does not answer: states of jobs still queued or running
FROM_QUEUE = "queue"
# no scheduler was asked (local runs), or none answered
FROM_NOWHERE = "none"
