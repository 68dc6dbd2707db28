"""Each test starts with torch's thread count as the worker had it: a test that sets one thread and
does not put it back would otherwise run the next tests of its worker on one thread (the goldens
and the comparison fix their own count, ``goldens.threads``; a test's own expected values do not)."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _torch_threads_put_back():
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
