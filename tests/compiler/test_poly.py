from hypothesis import given, strategies as st

from compiler.ir.poly import Poly

small = st.integers(min_value=-50, max_value=50)
terms = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2), small), max_size=5)


def _build(rows):
    return Poly.from_json([list(r) for r in rows])


def _direct(rows, B, S, L):
    return sum(c * B**b * S**s * L**l for b, s, l, c in rows)


@given(terms, terms, st.integers(1, 9), st.integers(1, 9), st.integers(0, 9))
def test_arithmetic_matches_direct_evaluation(r1, r2, B, S, L):
    p, q = _build(r1), _build(r2)
    assert (p + q)(B=B, S=S, L=L) == _direct(r1, B, S, L) + _direct(r2, B, S, L)
    assert (p * q)(B=B, S=S, L=L) == _direct(r1, B, S, L) * _direct(r2, B, S, L)


@given(terms)
def test_json_round_trip(rows):
    p = _build(rows)
    assert Poly.from_json(p.to_json()) == p


def test_degree_and_text():
    p = Poly.var("B") * Poly.var("S") * Poly.var("S") * 3 + 2
    assert p.degree("S") == 2 and p.degree("L") == 0
    assert str(p) == "3*B*S^2 + 2"


def test_missing_variable_is_an_error():
    import pytest

    with pytest.raises(ValueError, match="needs a value for L"):
        Poly.var("L")(B=1)
