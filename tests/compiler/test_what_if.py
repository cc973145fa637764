"""What-if bounds (compiler/place/what_if.py) on hand-made options: the worse-everywhere check, the plan's pools
under a move, and the union of several moves' options (whose optimum tests/compiler/test_sensitivity.py holds
against each move's own)."""

from __future__ import annotations

from dataclasses import replace

from compiler.ir.pool_option import ClassService, PoolOption

CURVE = ((0.5, 0.2, 0.3, 0.010, 0.012), (0.9, 0.4, 0.9, 0.012, 0.020))


def _option(key="decode:x:tp1:pp1:b8", rate=10.0, curve=CURVE, watts=700.0, classes=("chat",)) -> PoolOption:
    return PoolOption(key, "decode", (("x", 1),), power_w=400.0, provisioned_w=watts, kv_device="x", tp=1, pp=1,
                      batch=8, classes=tuple(ClassService(c, rate, curve) for c in classes))


def _slower(curve, by=1.1):
    return tuple((u, *(t * by for t in rest)) for u, *rest in curve)


def test_a_slower_option_is_no_better_and_anything_it_gains_is():
    from compiler.place.what_if import no_better

    old = _option()
    assert no_better(old, old)
    assert no_better(_option(rate=9.0, curve=_slower(CURVE)), old)
    assert no_better(replace(old, power_w=999.0, idle_w=50.0), old)  # the drawn power is reported, never optimised
    assert not no_better(old, None)  # an option the instance did not have
    assert not no_better(_option(rate=10.5), old)
    faster_tpot_at_one_load = (CURVE[0], (0.9, 0.4, 0.9, 0.012, 0.019))
    assert not no_better(_option(curve=faster_tpot_at_one_load), old)
    faster_ttft_at_light_load = ((0.5, 0.2, 0.29, 0.010, 0.012), CURVE[1])
    assert not no_better(_option(curve=faster_ttft_at_light_load), old)
    assert not no_better(_option(curve=(CURVE[0], (0.95, 0.4, 0.9, 0.012, 0.02))), old)  # other samples
    assert not no_better(_option(watts=650.0), old)  # fewer provisioned watts
    assert not no_better(_option(classes=("chat", "long")), old)  # a class it did not serve
    assert no_better(_option(classes=()), old)  # one it no longer serves
    assert not no_better(replace(old, devices=(("x", 2),)), old)


def test_the_check_reads_every_option_of_a_move_and_a_new_key_fails_it():
    from compiler.place.what_if import no_better_options

    a, b = _option("decode:x:tp1:pp1:b8"), _option("decode:x:tp1:pp1:b16", rate=20.0)
    assert no_better_options([a, replace(b, classes=(ClassService("chat", 19.0, CURVE),))], [a, b])
    assert no_better_options([a], [a, b])  # an option gone
    assert not no_better_options([a, b, _option("decode:x:tp1:pp1:b32")], [a, b])
    assert not no_better_options([a, replace(b, classes=(ClassService("chat", 21.0, CURVE),))], [a, b])


def test_the_plan_pools_under_a_move_are_found_by_shape_whatever_their_class_or_target_suffix():
    from compiler.place.what_if import restricted_to

    moved = [_option("decode:x:tp1:pp1:b8"), _option("decode:x:tp1:pp1:b16"), _option("prefill:x:tp1:pp1:b4")]
    replicas = (("decode:x:tp1:pp1:b8|chat", 3), ("prefill:x:tp1:pp1:b4>x+y", 1), ("decode:x:tp1:pp1:b16", 0))
    assert [o.key for o in restricted_to(moved, replicas)] == ["decode:x:tp1:pp1:b8", "prefill:x:tp1:pp1:b4"]


def test_a_union_keeps_the_options_once_and_each_moved_version_under_a_key_of_its_own():
    from compiler.place.what_if import union_of

    a, b = _option("decode:x:tp1:pp1:b8"), _option("decode:x:tp1:pp1:b16")
    faster, slower = replace(a, classes=(ClassService("chat", 12.0, CURVE),)), replace(b, provisioned_w=800.0)
    out = union_of([a, b], [[faster, b], [a, slower], [a, b]])
    assert [o.key for o in out] == [a.key, b.key, f"{a.key}@0", f"{b.key}@1"]
    assert out[2].classes == faster.classes and out[3].provisioned_w == 800.0
