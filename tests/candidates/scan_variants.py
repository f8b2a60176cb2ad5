"""Test candidates derived from the shipped CPU baseline by editing only its Python.

The C++ source stays byte-identical, so the whole test run builds it once (the build cache is keyed on
load_inline's arguments, not on the Python around them).
"""

from __future__ import annotations

from pathlib import Path

BASELINE = (
    Path(__file__).resolve().parents[2] / "problems" / "selective_scan_cpu" / "solutions" / "baseline.py"
)
RETURN = "\n        return y"  # forward's last line (a noqa comment may follow it)


def baseline() -> str:
    return BASELINE.read_text()


def with_forward_tail(*lines: str) -> str:
    """The baseline with its result bound to `y`, then `lines` (indented as forward's body), then `return y`."""
    src = baseline()
    at = src.rfind(RETURN)
    if at < 0 or "\n" in src[at + len(RETURN) :].rstrip("\n"):
        raise AssertionError("baseline.py changed: update tests/candidates/scan_variants.py")
    body = "\n".join(f"        {ln}" for ln in lines)
    return f"{src[:at]}\n{body}{src[at:]}"


def replace(old: str, new: str) -> str:
    src = baseline()
    if old not in src:
        raise AssertionError(f"baseline.py lacks {old!r}")
    return src.replace(old, new)


def wrong_no_skip() -> str:
    return with_forward_tail("y = y - x * self.D")  # forgets the D skip


def python_exception() -> str:
    return with_forward_tail("raise ValueError('boom in forward')")


def wrong_shape() -> str:
    return with_forward_tail("y = y[:, :-1]")


def wrong_dtype() -> str:
    return with_forward_tail("y = y.double()")


def nan_output() -> str:
    return with_forward_tail("y[0, 0, 0] = float('nan')")


def host_loop() -> str:
    return with_forward_tail("while True:", "    pass")


def out_of_memory() -> str:
    return with_forward_tail("y = y + torch.empty(1 << 44, dtype=torch.float32)[: y.numel()].view_as(y)")


def segfault() -> str:
    return with_forward_tail("import ctypes", "ctypes.string_at(0)")


def wrong_constructor() -> str:
    return replace(
        "def __init__(self, d_model: int, d_state: int):",
        "def __init__(self, d_model: int):\n        d_state = 16",
    )


def misnamed_param() -> str:
    src = replace("self.D = nn.Parameter", "self.D_skip = nn.Parameter")
    return src.replace("self.D.contiguous()", "self.D_skip.contiguous()")


def python_only_edit() -> str:
    return replace('"""Honest C++ baseline', '"""Edited docstring: honest C++ baseline')


def cpp_syntax_error() -> str:
    src = replace("  auto y = torch::empty_like(x);", "  auto y = torch::empty_like(x);\n  int oops = ;")
    return src.replace('name="scan_cpu_baseline"', 'name="scan_cpu_broken"')


def oob_write(on: bool = True) -> str:
    """One float written just past a 16-float heap array the C++ allocates for itself: nothing visible
    without ASan (glibc's chunk has room for it, the output stays right), a heap-buffer-overflow under it.
    The write sits behind a switch the Python sets after loading (`on`): both settings share one C++
    source, so the CPU sanitizer's tests build it with ASan once; off, it is the baseline's code and clean."""
    src = replace(
        "  auto y = torch::empty_like(x);",
        "  auto y = torch::empty_like(x);\n"
        "  if (g_stray_write) {\n"
        "    float* scratch = new float[N];\n"
        "    volatile float* slot = scratch;  // volatile: the store stays\n"
        "    slot[N] = 0.f;  // one past the end\n"
        "    delete[] scratch;\n"
        "  }",
    )
    for old, new in (
        (
            "static inline float softplus",
            "static bool g_stray_write = false;\nvoid set_stray_write(bool on) { g_stray_write = on; }\n\nstatic inline float softplus",
        ),
        ('functions=["selective_scan"]', 'functions=["selective_scan", "set_stray_write"]'),
        ('name="scan_cpu_baseline"', 'name="scan_cpu_oob_write"'),
        ("\n\nclass ModelNew", f"\n_ext.set_stray_write({on})\n\n\nclass ModelNew"),
    ):
        if old not in src:
            raise AssertionError(f"baseline.py lacks {old!r}: update oob_write")
        src = src.replace(old, new, 1)
    return src
