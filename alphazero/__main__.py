"""`python -m alphazero ...`: the same command line as the `alphazero` program."""

import sys

from alphazero.app.cli import main

sys.exit(main())
