"""Where a tracked run logs: the store MONAI's handlers use, so one run has one store."""

from __future__ import annotations

from hpc_runner.tracking.session import config_destination

MONAI_SETTINGS = {"handlers_id": {}, "configs": {
    "experiment_name": "from-settings",
    "evaluator": {"_target_": "MLFlowHandler", "tracking_uri": "$'sqlite:///' + @output_dir + '/handler.db'"}}}


def test_the_configs_own_tracking_uri_wins_as_monai_never_replaces_it() -> None:
    config = {"output_dir": "/runs/r", "tracking_uri": "sqlite:////data/x.db"}  # `--tracking_uri` added it
    found = config_destination(config, {"monai": MONAI_SETTINGS})
    assert found == {"tracking_uri": "sqlite:////data/x.db", "experiment_name": "from-settings"}


def test_a_handlers_own_store_is_used_when_nothing_else_names_one_and_expressions_are_resolved() -> None:
    found = config_destination({"output_dir": "/runs/r"}, {"monai": MONAI_SETTINGS})
    assert found["tracking_uri"] == "sqlite:////runs/r/handler.db"


def test_nothing_named_leaves_the_default_to_the_settings() -> None:
    assert config_destination({"output_dir": "/runs/r"}, {"kind": "mlflow", "monai": None}) == {}
    # an expression that cannot be resolved before the run is not guessed at
    assert config_destination({"tracking_uri": "$@missing + 'x'"}, {"monai": None}) == {}
