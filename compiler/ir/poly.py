"""Polynomials in the shape variables of a trace.

A trace is captured once with symbolic batch and length dimensions, so every
FLOP and byte count is a polynomial in a few named variables:

- ``B``: batch (sequences in flight),
- ``S``: prompt length of a prefill step,
- ``L``: cached context length seen by a decode step.

`Poly` stores such a polynomial exactly (integer coefficients, integer
exponents) and evaluates it at any point without re-tracing. It is stdlib only
so the cost of ``import compiler`` stays small.

>>> p = Poly.var("B") * Poly.var("S") * 4096 + 7
>>> p(B=2, S=10)
81927
>>> Poly.from_json(p.to_json()) == p
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

VARIABLES: tuple[str, ...] = ("B", "S", "L")

Exponents = tuple[int, ...]  # one exponent per entry of VARIABLES


@dataclass(frozen=True, slots=True)
class Poly:
    """An integer polynomial in `VARIABLES`; terms sorted, zero terms dropped."""

    terms: tuple[tuple[Exponents, int], ...] = ()

    @staticmethod
    def const(value: int) -> Poly:
        return Poly._build({(0,) * len(VARIABLES): int(value)})

    @staticmethod
    def var(name: str) -> Poly:
        exps = tuple(1 if v == name else 0 for v in VARIABLES)
        if sum(exps) != 1:
            raise ValueError(f"unknown shape variable {name!r}; expected one of {VARIABLES}")
        return Poly(((exps, 1),))

    @staticmethod
    def _build(acc: Mapping[Exponents, int]) -> Poly:
        return Poly(tuple(sorted((e, c) for e, c in acc.items() if c != 0)))

    def __add__(self, other: Poly | int) -> Poly:
        other = other if isinstance(other, Poly) else Poly.const(other)
        acc: dict[Exponents, int] = dict(self.terms)
        for e, c in other.terms:
            acc[e] = acc.get(e, 0) + c
        return Poly._build(acc)

    __radd__ = __add__

    def __mul__(self, other: Poly | int) -> Poly:
        if not isinstance(other, Poly):
            return Poly._build({e: c * int(other) for e, c in self.terms})
        acc: dict[Exponents, int] = {}
        for e1, c1 in self.terms:
            for e2, c2 in other.terms:
                e = tuple(a + b for a, b in zip(e1, e2))
                acc[e] = acc.get(e, 0) + c1 * c2
        return Poly._build(acc)

    __rmul__ = __mul__

    def __call__(self, **point: float) -> float:
        """Evaluate; variables that appear in the polynomial must be given."""
        total = 0
        for exps, coeff in self.terms:
            value = coeff
            for name, k in zip(VARIABLES, exps):
                if k:
                    if name not in point:
                        raise ValueError(f"{self} needs a value for {name}")
                    value *= point[name] ** k
            total += value
        return total

    def is_zero(self) -> bool:
        return not self.terms

    def degree(self, name: str) -> int:
        i = VARIABLES.index(name)
        return max((e[i] for e, _ in self.terms), default=0)

    def to_json(self) -> list[list[int]]:
        """`[[eB, eS, eL, coeff], ...]`: compact and exact."""
        return [[*e, c] for e, c in self.terms]

    @staticmethod
    def from_json(data: list[list[int]]) -> Poly:
        acc: dict[Exponents, int] = {}
        for row in data:
            *e, c = row
            if len(e) != len(VARIABLES):
                raise ValueError(f"polynomial term {row} needs {len(VARIABLES)} exponents")
            acc[tuple(int(x) for x in e)] = acc.get(tuple(e), 0) + int(c)
        return Poly._build(acc)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for exps, coeff in reversed(self.terms):
            factors = [f"{n}^{k}" if k > 1 else n for n, k in zip(VARIABLES, exps) if k]
            parts.append("*".join([str(coeff)] + factors) if coeff != 1 or not factors else "*".join(factors))
        return " + ".join(parts)


ZERO = Poly()
