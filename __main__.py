"""``python -m looptune`` runs the looptune command."""
import sys

from .cli import main

sys.exit(main())
