"""``python -m helmpinn``: the command line (see helmpinn.cli)."""
import sys

from .cli import main

sys.exit(main())
