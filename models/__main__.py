"""``python -m models``: regenerate the example models and their sample data."""

import sys

from models.generate import main

sys.exit(main())
