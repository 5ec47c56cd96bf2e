"""``python -m models.decoders``: regenerate the decoders' directories."""

import sys

from models.decoders.generate import main

sys.exit(main())
