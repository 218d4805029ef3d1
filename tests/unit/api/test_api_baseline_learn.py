"""Learning a baseline from a run's passing nodes, SuperBench's way: nodes off a figure's centre
by more than the fraction are left out and named, the centres computed again until nothing
changes; a failed node is never used."""

from __future__ import annotations

import random

from gpuval_api.baseline.learn import MAD_TO_SIGMA, NodeFigures, keys, learn, robust
from gpuval_api.baseline.samples import Sample
from gpuval_api.baselinemodel import BaselineKey, SourceKind
from gpuval_api.figures import FABRIC_PAIR
from tests.support.baselines import GPUS, measured, node_figures, slowed

KEY = BaselineKey(
    gpu_product="NVIDIA H200", gpu_count=GPUS, power_limit_watts=700, pcie_link="gen5x16"
)


def test_fifty_nodes_of_which_three_are_slow_learn_without_the_three_and_name_them() -> None:
    slow = {"gpu-node-07", "gpu-node-23", "gpu-node-41"}
    nodes = [
        node_figures(measured(name, slowed(0.85, [1]) if name in slow else ()))
        for name in (f"gpu-node-{i:02d}" for i in range(50))
    ]

    learned = learn(nodes, KEY, fraction=0.1, min_nodes=5)

    assert learned.problem == "" and learned.spec is not None
    assert {e.node for e in learned.excluded} == slow
    assert len(learned.kept) == 47 and not slow & set(learned.kept)
    assert all(e.round == 1 and e.value / e.centre < 0.9 for e in learned.excluded)
    assert all(n.passed for n in nodes)  # slow, yet above every absolute threshold
    assert learned.rounds == 2  # round 2 found nothing more to leave out
    assert learned.bimodal == "" and learned.modes == ()  # three slow nodes are no second kind
    healthy = measured("reference")
    bf16 = learned.spec.figure("burn.bf16")
    assert bf16 is not None and bf16.nodes == 47 and bf16.samples == 47 * GPUS
    reference = next(s.value for s in node_figures(healthy).samples if s.figure == "burn.bf16")
    assert bf16.centre == round(reference, 3) and bf16.spread == 0.0
    source = learned.spec.source
    assert source.nodes_offered == 50 and {e.node for e in source.excluded} == slow


def test_a_failed_node_is_never_absorbed_even_when_its_figures_look_good() -> None:
    nodes = [node_figures(measured(f"n{i}")) for i in range(6)]
    # A node whose burn miscompares: failed, whatever its throughput.
    wrong = node_figures(measured("wrong", [{"kind": "miscompare", "gpu": 0}]))
    assert not wrong.passed

    learned = learn([*nodes, wrong], KEY, fraction=0.1, min_nodes=5)

    assert learned.failed == ("wrong",)
    assert "wrong" not in learned.kept and learned.spec is not None
    assert learned.spec.source.nodes_offered == 6


def test_centre_and_spread_are_the_median_and_the_scaled_mad() -> None:
    rng = random.Random(18)
    nodes = []
    for i in range(40):
        factor = 0.7 if i < 4 else 1.0
        values = [100 * factor * (1 + rng.uniform(-0.02, 0.02)) for _ in range(8)]
        samples = tuple(
            Sample("burn.bf16", v, "matrixSize=16384", gpu) for gpu, v in enumerate(values)
        )
        nodes.append(NodeFigures(f"n{i}", KEY, True, samples))

    learned = learn(nodes, KEY, fraction=0.1, min_nodes=5)

    assert learned.spec is not None
    assert {e.node for e in learned.excluded} == {"n0", "n1", "n2", "n3"}
    kept = [s.value for n in nodes[4:] for s in n.samples]
    centre, spread = robust(kept)
    entry = learned.spec.figure("burn.bf16")
    assert entry is not None
    assert entry.centre == round(centre, 3) and entry.spread == round(spread, 3)
    assert 99 < entry.centre < 101 and 0.5 < entry.spread / MAD_TO_SIGMA < 1.5


def test_a_fleet_split_in_two_has_no_baseline_and_says_it_is_bimodal() -> None:
    # Half the nodes at 0.85. Before: "the nodes disagree too much", not that they are two modes.
    nodes = [node_figures(measured(f"n{i}", slowed(0.85) if i % 2 else ())) for i in range(10)]

    learned = learn(nodes, KEY, fraction=0.1, min_nodes=3)

    assert all(n.passed for n in nodes)
    assert learned.spec is None and learned.excluded == ()
    assert learned.problem.startswith(
        "NVIDIA H200 x4, 700 W, PCIe gen5x16 is bimodal: 5 nodes (n0, n2, n4, n6, n8) at "
    )
    assert "and 5 nodes (n1, n3, n5, n7, n9) at " in learned.problem


def _two_kinds(slow: int, fast: int, factor: float = 0.85) -> list[NodeFigures]:
    return [node_figures(measured(f"slow-{i}", slowed(factor))) for i in range(slow)] + [
        node_figures(measured(f"fast-{i}")) for i in range(fast)
    ]


def test_a_fleet_mostly_slow_learns_nothing_and_names_both_modes_and_their_nodes() -> None:
    nodes = _two_kinds(slow=6, fast=4)

    learned = learn(nodes, KEY, fraction=0.1, min_nodes=3)

    # Before: the median kept the six slow nodes and learned them, without a word.
    assert learned.spec is None and learned.kept == ()
    fast, slow = learned.modes
    assert (fast.nodes, slow.nodes) == (
        tuple(f"fast-{i}" for i in range(4)),
        tuple(f"slow-{i}" for i in range(6)),
    )
    assert round(slow.centres["burn.bf16"] / fast.centres["burn.bf16"], 2) == 0.85
    assert learned.bimodal.startswith(
        "NVIDIA H200 x4, 700 W, PCIe gen5x16 is bimodal: 4 nodes (fast-0, fast-1, fast-2, "
        "fast-3) at "
    )
    assert "and 6 nodes (slow-0, slow-1, slow-2, slow-3, slow-4, slow-5) at " in learned.bimodal
    assert learned.bimodal.endswith(
        "learned nothing until a person chooses: kubectl gpuval baseline learn learns the better "
        "mode, or a GpuBaseline written by hand or imported"
    )
    assert learned.problem == learned.bimodal


def test_a_fleet_in_two_even_halves_is_bimodal_and_learns_nothing() -> None:
    # Before: 4 nodes at 1.0 and 4 at 0.9 learned 0.95 of the fast nodes without a word, and a
    # fast node could then lose 14 % and pass.
    for factor in (0.95, 0.9, 0.88, 0.86, 0.85):
        learned = learn(_two_kinds(slow=4, fast=4, factor=factor), KEY, fraction=0.1, min_nodes=3)

        assert learned.spec is None, factor
        fast, slow = learned.modes
        assert fast.nodes == tuple(f"fast-{i}" for i in range(4)), factor
        assert slow.nodes == tuple(f"slow-{i}" for i in range(4)), factor
        assert " is bimodal: 4 nodes (fast-0, " in learned.bimodal
        assert "learned nothing until a person chooses" in learned.bimodal


def test_halves_closer_than_half_the_fraction_are_one_mode() -> None:
    # 4 % apart: a baseline in the middle is 2 % from each, well within the fraction 0.1.
    learned = learn(_two_kinds(slow=4, fast=4, factor=0.96), KEY, fraction=0.1, min_nodes=3)

    assert learned.spec is not None and learned.modes == () and learned.bimodal == ""
    assert len(learned.kept) == 8


def test_a_spread_of_nodes_without_a_gap_is_not_bimodal() -> None:
    # Ten nodes from 0.82 to 1.0, 2 % apart: no gap between two groups, so one mode (whatever
    # learning then keeps of it), never two.
    nodes = [node_figures(measured(f"n{i}", slowed(1 - 0.02 * i))) for i in range(10)]

    learned = learn(nodes, KEY, fraction=0.1, min_nodes=3)

    assert learned.modes == () and learned.bimodal == ""


def test_a_person_learning_a_bimodal_stack_gets_its_better_mode() -> None:
    # kubectl gpuval baseline learn is the person's choice: the better mode, the other named.
    for slow, fast in ((6, 4), (4, 4), (4, 6)):
        learned = learn(
            _two_kinds(slow=slow, fast=fast), KEY, fraction=0.1, min_nodes=3, choose_mode=True
        )

        assert learned.problem == "" and learned.spec is not None
        assert learned.kept == tuple(f"fast-{i}" for i in range(fast))
        assert sorted(e.node for e in learned.excluded) == [f"slow-{i}" for i in range(slow)]
        assert all(e.value / e.centre < 0.9 for e in learned.excluded)
        bf16 = learned.spec.figure("burn.bf16")
        assert bf16 is not None and bf16.centre == 776.0
        assert learned.bimodal.endswith(
            f"learned the better mode ({fast} nodes) and left the other's nodes out, named in "
            "the GpuBaseline"
        )
        assert "is bimodal" in learned.spec.source.description


def test_a_fast_mode_too_small_to_learn_learns_nothing_rather_than_the_slow_one() -> None:
    learned = learn(_two_kinds(slow=6, fast=4), KEY, fraction=0.1, min_nodes=5, choose_mode=True)

    assert learned.spec is None
    assert learned.problem.startswith("NVIDIA H200 x4, 700 W, PCIe gen5x16 is bimodal: 4 nodes")
    assert "learned nothing until a person chooses" in learned.problem
    assert learned.problem.endswith("(the better mode has 4 nodes; baseline.minNodes is 5)")


def test_too_few_agreeing_nodes_name_min_nodes() -> None:
    nodes = [node_figures(measured(f"n{i}")) for i in range(3)]

    learned = learn(nodes, KEY, fraction=0.1, min_nodes=5)

    assert learned.spec is None and "baseline.minNodes is 5" in learned.problem


def test_a_slow_fabric_partner_does_not_drag_good_nodes_out() -> None:
    # A ring of 8 nodes; node n3's network is slow, so both its pairs are slow.
    def pair(a: int, b: int) -> float:
        return 240.0 if 3 in (a, b) else 380.0

    ring = [(i, (i + 1) % 8) for i in range(8)]
    nodes = []
    for node in range(8):
        samples = tuple(
            Sample(
                FABRIC_PAIR.baseline,
                pair(a, b),
                "pairBytes=1073741824,transport=IB/GDRDMA",
                peer_node=f"n{b if a == node else a}",
            )
            for a, b in ring
            if node in (a, b)
        )
        nodes.append(NodeFigures(f"n{node}", KEY, True, samples))

    learned = learn(nodes, KEY, fraction=0.1, min_nodes=5)

    assert [e.node for e in learned.excluded] == ["n3"]
    entry = learned.spec.figure(FABRIC_PAIR.baseline) if learned.spec else None
    # n2 and n4 stay (each has a good pair); their pairs with n3 no longer count once it is out:
    # the 6 other pairs of the ring, each counted once, from the 7 nodes kept.
    assert set(learned.kept) == {f"n{i}" for i in range(8)} - {"n3"}
    assert entry is not None and (entry.centre, entry.samples, entry.nodes) == (380.0, 6, 7)


def test_figures_measured_with_other_settings_neither_count_nor_exclude() -> None:
    nodes = [node_figures(measured(f"n{i}")) for i in range(6)]
    # A node whose burn ran with another matrix size, at half the speed: it does not compare.
    other = NodeFigures(
        "other-matrix",
        KEY,
        True,
        tuple(
            Sample(s.figure, s.value * 0.5, "matrixSize=8192", s.gpu)
            for s in nodes[0].samples
            if s.figure.startswith("burn.")
        ),
    )

    learned = learn([*nodes, other], KEY, fraction=0.1, min_nodes=5)

    assert learned.excluded == () and "other-matrix" in learned.kept
    entry = learned.spec.figure("burn.bf16") if learned.spec else None
    assert entry is not None and entry.nodes == 6 and entry.measured_with == "matrixSize=16384"


def test_a_learned_baseline_says_so_and_keys_come_commonest_first() -> None:
    four = [node_figures(measured(f"a{i}")) for i in range(5)]
    two = [node_figures(measured(f"b{i}", gpus=2)) for i in range(2)]

    learned = learn(four, KEY, fraction=0.1, min_nodes=5)

    assert learned.spec is not None and learned.spec.source.kind is SourceKind.LEARNED
    assert [k.gpu_count for k in keys([*two, *four])] == [GPUS, 2]


def _h2d_and_burn(burn: list[float]) -> list[NodeFigures]:
    """A node per burn value: its 8 GPUs' h2d all 50 GB/s (steady), its burn that value."""
    return [
        NodeFigures(
            f"n{i}",
            KEY,
            True,
            (
                *(Sample("h2d", 50.0, "transferMiB=1024", gpu) for gpu in range(8)),
                *(Sample("burn.bf16", value, "matrixSize=16384", gpu) for gpu in range(8)),
            ),
        )
        for i, value in enumerate(burn)
    ]


def test_one_noisy_figure_is_left_out_and_every_other_figure_is_still_learned() -> None:
    # Most nodes are more than 0.1 off the burn's centre: the nodes disagree on the burn alone.
    scattered = learn(
        _h2d_and_burn([60, 140, 70, 130, 80, 120, 100, 65, 135, 100]),
        KEY,
        fraction=0.1,
        min_nodes=5,
    )
    # Every node within 0.1 of the burn's centre yet its spread wider than 0.1 of it can only be
    # nodes piled at both edges: two modes (gpuval_api.baseline.modes), said as such and nothing
    # learned for the key until a person chooses, not a noisy figure left out.
    split = learn(_h2d_and_burn([91, 109] * 5), KEY, fraction=0.1, min_nodes=5)

    learned = scattered
    assert learned.problem == "" and learned.spec is not None
    assert [f.figure for f in learned.spec.figures] == ["h2d"]
    assert learned.excluded == () and len(learned.kept) == 10
    ((said),) = learned.left_out
    assert said.startswith("burn.bf16: ") and "disagree too much on it" in said
    assert f"left out {said}" in learned.spec.source.description
    assert "nodes were more than 0.1 off its centre" in scattered.left_out[0]
    assert split.spec is None and "is bimodal: 5 nodes (n1, n3, n5, n7, n9)" in split.problem
