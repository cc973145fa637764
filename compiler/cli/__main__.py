"""``python -m compiler.cli``: the same as the ``gimletc`` console script."""

from compiler.cli.main import entry

entry()
