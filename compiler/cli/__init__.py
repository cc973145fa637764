"""The ``gimletc`` command line: one module per command, each with its renderer beside it.

`main` builds the parser from the commands' ``register`` functions and the
shared option groups (`options`); `console` owns JSON output, progress and
number formats. Nothing else in gimletc imports this package.
"""
