"""The error hierarchy every pass raises; the CLI maps each class to an exit code.

Messages name the input (file, field, block or stage) and say what to do.
"""

from __future__ import annotations


class GimletError(Exception):
    """Base class; `exit_code` is what the CLI returns."""

    exit_code = 1


class BadInput(GimletError):
    """A model spec, file, flag or field the user gave is wrong."""

    exit_code = 2


class UnsupportedModel(BadInput):
    """The model's architecture or an op in it has no support yet."""


class Infeasible(GimletError):
    """No placement satisfies the constraints; the message names the binding ones."""

    exit_code = 3


class RuntimeFailure(GimletError):
    """A stage worker or transfer failed while executing a plan."""

    exit_code = 4
