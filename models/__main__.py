"""``python -m models``: regenerate the example models and their sample data."""

import sys

from models.build import main

sys.exit(main())
