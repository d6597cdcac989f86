"""``python -m outreach.cli``: the same entry point as the ``outreach`` script."""

from __future__ import annotations

import sys

from outreach.cli import main

sys.exit(main())
