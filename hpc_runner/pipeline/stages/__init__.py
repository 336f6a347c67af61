"""The kinds of pipeline stages, one class each (model.py's ``Kind`` says what a kind answers), in one registry.

A new kind of stage is one subclass of ``StageKind`` (its fields, config, pre-flight, submission, resume,
view and summary) and one line of ``KINDS`` (a field of its own is known from its ``keys``). The pipeline
record keeps a stage's kind as its name (``kind: sweep``); ``kind_of`` gives the kind object back.
"""

from __future__ import annotations

from hpc_runner.pipeline.stages.base import StageKind
from hpc_runner.pipeline.stages.export import ExportKind
from hpc_runner.pipeline.stages.registry import KINDS, kind_of, kinds, register
from hpc_runner.pipeline.stages.run import RunKind
from hpc_runner.pipeline.stages.select import SelectKind
from hpc_runner.pipeline.stages.shards import ShardsKind
from hpc_runner.pipeline.stages.sweep import SweepKind
from hpc_runner.pipeline.stages.tune import TuneKind

# The order is the order a stage's kind is looked for (spec.py): the kinds with their own field first (a stage with
# two of them is refused, naming the first two in this order), then sharded before one run.
register([SelectKind, SweepKind, TuneKind, ExportKind, ShardsKind, RunKind], StageKind)

__all__ = ["KINDS", "StageKind", "kind_of", "kinds"]
