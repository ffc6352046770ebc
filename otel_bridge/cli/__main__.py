"""``python -m otel_bridge.cli``: the same as the ``otel-bridge`` console script."""

import sys

from otel_bridge.cli import main

sys.exit(main())
