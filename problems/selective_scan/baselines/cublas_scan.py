"""Library composition baseline for `agent bench --baselines`: the three projections as cuBLAS fp32 GEMMs
(`F.linear`, TF32 off) and a plain scan kernel (one thread per (batch, channel), its 16 states in
registers). That is the shipped trajectory's step 02 exactly, so it is loaded from there rather than
copied: what a user who writes no fused kernel would run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

STEP = Path(__file__).resolve().parent.parent / "solutions" / "02_threads_along_d.py"
_spec = importlib.util.spec_from_file_location("selective_scan_step02", STEP)
if _spec is None or _spec.loader is None:
    raise ImportError(f"cannot import {STEP}")
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

ModelNew = _module.ModelNew
