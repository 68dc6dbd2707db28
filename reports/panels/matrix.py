"""The verdict matrix: one cell per case x backend x output, linked to its row in the details."""
from __future__ import annotations

from reports.panels import Context, Panel


def matrix(context: Context) -> dict:
    idx = context.idx
    return {"cases": idx.case_list(), "backends": idx.backends, "outputs": idx.outputs, "cells": context.cells}


PANEL = Panel("matrix", matrix)
