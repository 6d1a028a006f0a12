"""``python -m helmpinn.cli``: the command line, as ``python -m helmpinn``."""
import sys

from . import main

sys.exit(main())
