"""The operator library: importing this package registers every operator (one module a
family)."""
from __future__ import annotations

from . import elementwise, index, misc, nn, pool, reduce, shape  # noqa: F401
from . import layout  # noqa: F401,E402 - blocked-layout ops of the layout pass
from . import winograd  # noqa: F401,E402 - its Winograd convolution
