"""Pipelines: a study's chain of stages (search, select the best, evaluate, export, sharded inference) queued at once.

- ``model.py``: the types every module shares (``StageSpec``, ``PipelineSpec``, ``StageConfig``, ``StageView``
  and ``Kind``, what a stage's kind answers), below every other module;
- ``spec.py``: the pipeline file, checked (names, kinds, ``from``, cycles) before anything is loaded;
- ``stages/``: the stage kinds (sweep, tune, select, run, shards, export), one class each in one registry
  (``KINDS``): what every other module does with a stage of that kind. The kinds import the steps below;
  no step imports a kind (each asks ``stages/registry.py``'s ``kind_of``), so the imports go one way;
- ``configs.py``: each stage's bundle config and the pre-flight of all of them, before anything is queued;
- ``record.py``: ``pipeline.yaml``, the one record of the stages' states and their transitions (under a lock);
- ``selection.py``: which point is best (``mode: max|min``, ties, no finished point);
- ``choice.py``: what a stage ``from`` a select stage gets (the weights and the chosen point's values);
- ``submit.py``: start a pipeline (every stage queued, each waiting on its inputs);
- ``select_job.py``: what the select stage's job runs (decide, record, apply, or cancel what depends on it);
- ``propagate.py``: cancel the stages that depend on a failed one;
- ``view.py``: where every stage stands (read-only), for ``status``, ``collect`` and ``report``;
- ``resume.py``, ``cancel.py``, ``summary.py``: the commands on a pipeline dir.
"""

from hpc_runner.pipeline import stages as stages  # registers the stage kinds before any module asks for one
