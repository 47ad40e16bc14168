"""tests/tier.py: which calls of a `pytest --durations=0` log are over the fast tier's budget."""

from tier import over_budget

LOG = """============================= slowest durations =============================
22.51s setup    tests/test_a.py::test_x[eager-vit]
1.00s call     tests/test_b.py::test_y[a b-c]
0.99s call     tests/test_b.py::test_z
12.30s call     tests/test_c.py::test_w
0.10s teardown tests/test_c.py::test_w
(1234 durations < 0.005s hidden.  Use -vv to show these durations.)
"""


def test_calls_at_or_over_the_budget_are_listed_setups_are_not():
    assert over_budget(LOG, 1.0) == ["tests/test_b.py::test_y[a b-c]", "tests/test_c.py::test_w"]
    assert over_budget(LOG, 13.0) == []
