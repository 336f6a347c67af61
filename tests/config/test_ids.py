"""Config id paths: walking, reading and writing nested dicts and lists."""

from __future__ import annotations

from hpc_runner.config.ids import iter_ids


def test_iter_ids_yields_parents_before_children_in_file_order() -> None:
    config = {"a": 1, "net": {"ch": [8, 16], "k": 3}, "b": []}
    assert [i for i, _ in iter_ids(config)] == ["a", "net", "net::ch", "net::ch::0", "net::ch::1", "net::k", "b"]
    assert list(iter_ids({"x": 1}, "top")) == [("top::x", 1)]


def test_iter_ids_walks_a_value_nested_far_past_the_recursion_limit() -> None:
    deep: list = []
    node = deep
    for _ in range(20_000):  # an override value can be this deep; the walk must not recurse
        node.append([])
        node = node[0]
    ids = [i for i, _ in iter_ids({"v": deep})]
    assert len(ids) == 20_001 and ids[-1] == "v" + "::0" * 20_000
