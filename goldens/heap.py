"""The streaming passes' C heap: freed chunk buffers kept for reuse, fragments given back.

The golden pass and the comparison allocate and free the same few buffer sizes once per chunk
(2048 x 1024 FP64 = 16 MiB, 107 chunks at the article's case). By default glibc serves such
blocks with fresh mmaps (its mmap threshold starts at 128 KiB and only rises after a free) and
returns the heap's free top to the kernel above its trim threshold, so each chunk's buffers are
page-faulted and zeroed again. Measured at M=32768, K=512, N=1024 (the gate alone, 2-core EPYC,
one process): 17.0 s first call, 12.1 s second, peak RSS 1.34 GB by default; 9.6 s and 9.7 s,
1.22 GB with M_MMAP_THRESHOLD = 32 MiB (glibc's largest accepted value) and M_TRIM_THRESHOLD =
1 GiB. The trim threshold alone is worse (29.7 s): fixing it disables the dynamic mmap
threshold, so every block above 128 KiB is mapped afresh; both are set together.

Kept memory can also pile up as fragments that no later buffer fits. torch allocates every tensor
with ``posix_memalign(64, size)``, which glibc (2.36 here) serves by carving ``size + 64 + 32``
bytes out of a free chunk: the hole a freed buffer leaves is too small for the next buffer of its
size. A C loop of six buffers of 2-16 MiB, freed and allocated again 100 times, holds 243 MB of
heap with ``posix_memalign`` and 57 MB (its working set, 54 MB) with ``malloc``. Measured on a
2-core Xeon with AMX (the gate at M = 65536, K = 512, N = 1024, the case's inputs and outputs
0.8 GB mapped apart): 0.5 GB of heap in use and 1.75 GB free around it, RSS growing about 45 MB a
2048-row block; the gate at the article's case peaked at 7.9 GB there, 3.8 GB on hosts where it
stayed flat. ``release_fragments`` (the golden pass calls it after each block, a derived golden
that takes a chunk in many pieces of a few rows after each piece too: ``PIECE_GROWTH_LIMIT``) gives the pages of
the heap's free chunks back to the kernel (``malloc_trim``) once the resident free memory has grown
by ``GROWTH_LIMIT`` (1 GiB) since the last time, and keeps the free top (up to the trim
threshold), where each block's working set comes back: the article's case's gate then peaks at
4.5 GB, the comparison with its diagnosis layers at 4.8 GB instead of 8.9 GB, in the same time
(the compare stage 78.0-80.5 s against 80.2-84.1 s, back to back). Giving back the top as well
cost 7%; a limit of 512 MiB released after nearly every block (each block's freed working set
counts) and cost 10% at M = 65536; the heap's growth as the signal (instead of resident free
memory) left RSS at 3.3 GB of 3.8 there, released holes filling again without the heap growing.

This changes how fast memory is reused, never a value: golden bits and verdicts do not depend
on it. An explicit ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` in the environment
wins over the thresholds, and the run manifest records what was applied (``state()``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30
GROWTH_LIMIT = 1 << 30
# A chunk evaluated in pieces (``accuracy.derived``'s ``row_elements``: attention at N = 32768 takes
# 64 pieces of 16 queries a 1024-row chunk) frees each piece's [16, N] FP64 buffers (4 MiB, under
# the mmap threshold) into the heap, where they pile up inside a chunk that the per-block check
# never sees. Checked after each piece, at half the block limit: the whole M = 2048, N = 32768,
# D = 128 attention comparison (2-core EPYC, one process) 4.54 GB peak RSS and 98 s unchecked,
# 3.92 GB and 88 s checked at 1 GiB (4.15 GB at M = 4096), 3.61 GB and 101 s at 512 MiB,
# 3.55 GB and 115 s at 256 MiB (123 releases against 28).
PIECE_GROWTH_LIMIT = 512 << 20
_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_applied: dict | None = None
_releases = 0
_PAGE = os.sysconf("SC_PAGE_SIZE")
_mark: int | None = None   # the resident free memory after the last release


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None
    except OSError:
        return None


def keep_freed_memory() -> dict:
    """Apply the tuning once per process (glibc only); returns ``state()``."""
    global _applied
    if _applied is not None:
        return _applied
    user = [k for k in _ENV if k in os.environ]
    libc = None if user else _libc()
    if user:
        _applied = {"applied": False, "why": f"set in the environment: {', '.join(user)}"}
    elif libc is None:
        _applied = {"applied": False, "why": "not glibc"}
    else:
        ok = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        _applied = {"applied": ok, "glibc": libc.gnu_get_libc_version().decode(),
                    "mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD}
        if not ok:
            _applied["why"] = "mallopt refused the values"
    return _applied


def state() -> dict | None:
    """What ``keep_freed_memory`` applied in this process (None: not called)."""
    return _applied


def fragment_releases() -> int:
    """How many times ``release_fragments`` gave free pages back in this process."""
    return _releases


_heap = None


def _heap_calls():
    """libc with ``mallinfo2`` (glibc 2.33+) and ``malloc_trim``, or False."""
    global _heap
    if _heap is None:
        libc = _libc()
        _heap = False
        if libc is not None and hasattr(libc, "mallinfo2") and hasattr(libc, "malloc_trim"):
            libc.mallinfo2.restype = _Mallinfo2
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
            _heap = libc
    return _heap


def _resident_free(libc) -> int:
    """Resident bytes not in a live heap block or a mapped one: the heap's free chunks still in
    memory, plus the process's code and Python's own pools (constant across blocks)."""
    info = libc.mallinfo2()
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1]) * _PAGE
    return resident - info.uordblks - info.hblkhd


def release_fragments(limit: int = GROWTH_LIMIT) -> bool:
    """Give the pages of the heap's free chunks back to the kernel once the resident free memory
    has grown by more than ``limit`` bytes since the last time; True when it did."""
    global _releases, _mark
    libc = _heap_calls()
    if not libc:
        return False
    free = _resident_free(libc)
    if _mark is None or free < _mark:
        _mark = free
    if free - _mark <= limit:
        return False
    libc.malloc_trim(TRIM_THRESHOLD)   # the heap's free top stays, as the trim threshold keeps it
    _mark = _resident_free(libc)
    _releases += 1
    return True
