"""`python -m server` is `composer-lsp` (server/cli.py)."""

import sys

from server.cli import main

sys.exit(main())
