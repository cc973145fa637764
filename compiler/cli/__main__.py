"""``python -m compiler.cli``: the same as the ``gimletc`` console script."""

import sys

from compiler.cli.main import main

sys.exit(main())
