"""--space parsing: typed values, Optuna distributions, round trips, corners, and refusals."""

from __future__ import annotations

import pytest

from hpc_runner.errors import UserError
from hpc_runner.tune.space import parse_space, space_corners


def test_each_function_maps_to_its_optuna_distribution() -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    space = parse_space(["learning_rate=loguniform(1e-4,1e-1)", "noise_max=uniform(0,0.5)",
                         "batch_size=int(1,9,2)", "network_def::channels=choice([8,16],[16,32])"])
    d = space.distributions()
    assert d["learning_rate"] == FloatDistribution(1e-4, 0.1, log=True)
    assert d["noise_max"] == FloatDistribution(0.0, 0.5)
    assert d["batch_size"] == IntDistribution(1, 9, step=2)
    assert d["network_def::channels"] == CategoricalDistribution(["[8,16]", "[16,32]"])


def test_list_choices_reach_optuna_as_json_text_and_come_back_typed() -> None:
    import optuna

    space = parse_space(["network_def::channels=choice([8,16],[16,32])", "mode=choice(a,3,null,false,2.5)"])
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(40):
        typed = space.typed(study.ask(space.distributions()).params)
        assert typed["network_def::channels"] in ([8, 16], [16, 32])
        seen.add(repr(typed["mode"]))
    assert seen == {"'a'", "3", "None", "False", "2.5"}  # each choice with its own type, none as text


def test_corners_cover_each_bound_and_each_choice_with_the_others_at_their_first_value() -> None:
    space = parse_space(["learning_rate=loguniform(1e-4,1e-1)", "+extra=int(2,8,3)", "c=choice([1],[2],[3])"])
    corners = space_corners(space)
    first = {"learning_rate": 1e-4, "+extra": 2, "c": [1]}
    assert corners == [first, {**first, "learning_rate": 0.1}, {**first, "+extra": 8},
                       {**first, "c": [2]}, {**first, "c": [3]}]


@pytest.mark.parametrize(
    ("option", "needles"),
    [
        ("lr=loguniform(0,1)", ["at id 'lr'", "positive bounds", "0 < a < b"]),
        ("lr=uniform(2,1)", ["not in order", "a < b"]),
        ("lr=unifrom(1,2)", ["unknown function unifrom()", "Did you mean uniform()?"]),
        ("lr=int(1,2.5)", ["whole numbers", "2.5"]),
        ("lr=int(1,10,2)", ["multiple of the step 2"]),
        ("lr=choice(1)", ["at least two values", "--lr VALUE"]),
        ("lr=choice(1,1.0)", ["given twice"]),
        ("lr=choice([1,2)", ["unclosed bracket"]),
        ("lr=uniform(a,b)", ["takes two numbers"]),
        ("lr=3", ["not a function call"]),
        ("lr", ["has no '='"]),
        ("=choice(1,2)", ["no valid id"]),
    ],
)
def test_bad_space_is_one_paragraph_naming_the_option_the_id_and_what_was_expected(option, needles) -> None:
    with pytest.raises(UserError) as err:
        parse_space([option])
    text = err.value.paragraph()
    assert f"--space {option!r}" in text
    for needle in needles:
        assert needle in text


def test_an_id_searched_twice_or_no_space_is_refused() -> None:
    with pytest.raises(UserError, match="searched twice"):
        parse_space(["lr=uniform(0,1)", "+lr=uniform(0,2)"])
    with pytest.raises(UserError, match="no search space"):
        parse_space([])
