"""Zero-copy client shared memory for process-mode Python workers.

A request whose input views a client-registered system shared-memory region reaches the worker
as a reference to that region instead of a copy in the worker pool; an output the client wants
in a region is written there by the worker, straight from the model's array. Both sides use:

- region info ``(token, key, (st_dev, st_ino), offset, byte_size)``: one registration (token)
  of a key; the worker maps [offset, offset + byte_size) of ``/dev/shm/<key>`` itself, once per
  token (read-only for inputs, read-write for outputs), checks it is the very object the server
  registered, and drops the mapping when the server says the region was unregistered;
- an input payload ``(INPUT, info, offset, nbytes)`` and an output destination
  ``(info, offset, byte_size)``, offsets relative to the region.

The worker never writes outside a destination and only opens keys the server sent it (which
the server validated at registration). The server's side is in server/packing.py, the
worker's mappings in worker/region_maps.py; this module holds what both agree on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelyard.types import datatype_of

# Where POSIX shared-memory objects live (glibc's shm_open): the folder the server maps
# registered keys from (serving/shm_regions.py), and the worker too.
SHM_ROOT = "/dev/shm"
INPUT = "@region"  # an input payload that names a client region (never a segment name)
WRITTEN = "@written"  # an output the worker wrote into its client region: (WRITTEN, nbytes)


def written_output(name: str, array: np.ndarray[Any, Any], nbytes: int) -> tuple[Any, ...]:
    """The packed output for ``array`` that the worker wrote into its client region."""
    return (name, datatype_of(array.dtype), tuple(array.shape), (WRITTEN, nbytes))
