"""How the candidate worker words a failure the candidate caused: its kind (what the parent reports) and
the traceback frames that are the candidate's own (kernel.py), not the harness's."""

from __future__ import annotations

import traceback

import torch


class CandidateError(Exception):
    """A failure attributable to the candidate: `kind` is what the parent reports."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def candidate_traceback(exc: BaseException, limit_chars: int = 3000) -> str:
    """The traceback frames that are the candidate's (kernel.py), not the harness's."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith("kernel.py")]
    lines = [f'  File "kernel.py", line {f.lineno}, in {f.name}\n    {f.line}' for f in frames[-6:]]
    text = "\n".join(lines + [f"{type(exc).__name__}: {exc}"])
    return text[-limit_chars:]


def classify_exception(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError) or "out of memory" in text.lower():
        return "oom"
    if "can't allocate memory" in text or "not enough memory" in text.lower():
        return "oom"
    if "CUDA error" in text or "AcceleratorError" in text or "illegal memory access" in text:
        return "cuda_error"
    return "exception"
