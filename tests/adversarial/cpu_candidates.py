"""CPU twins of the GPU timing exploits, on tests/problems/scan_tiny.yaml: the shipped C++ baseline with only
its Python edited (tests/candidates/scan_variants.py), so no new C++ build."""

from __future__ import annotations

from tests.candidates.scan_variants import baseline

FORWARD_HEAD = "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        x = x.contiguous()\n"
COMPUTE = (
    "delta_raw = F.linear(x, self.proj_delta.weight, self.proj_delta.bias)",
    "Bm = F.linear(x, self.proj_B.weight)",
    "Cm = F.linear(x, self.proj_C.weight)",
    "A = -torch.exp(self.A_log.float())",
    "y = _ext.selective_scan(x, delta_raw, Bm.contiguous(), Cm.contiguous(), A.contiguous(), self.D.contiguous())",
)


def _lines(lines: tuple[str, ...] | list[str], indent: int = 8) -> str:
    return "".join(f"{' ' * indent}{ln}\n" if ln else "\n" for ln in lines)


def with_module_code(*lines: str, src: str | None = None) -> str:
    """The baseline with `lines` at module level, after the extension is loaded and before ModelNew."""
    src = src or baseline()
    head, tail = src.split("\n\nclass ModelNew", 1)
    return head + "\n\n" + "\n".join(lines) + "\n\n\nclass ModelNew" + tail


def with_forward(*lines: str, src: str | None = None) -> str:
    """The baseline with forward's whole body replaced by `lines` (x is already contiguous)."""
    src = src or baseline()
    start = src.index(FORWARD_HEAD)
    if not src.rstrip().endswith("return y"):
        raise AssertionError("baseline.py's forward changed: update tests/adversarial/cpu_candidates.py")
    return src[:start] + FORWARD_HEAD + _lines(lines)


# --- timers patched for good: the identity check after each case ------------------------------------------


def dilated_perf_counter() -> str:
    """time.perf_counter runs 4x slow from import on."""
    return with_module_code(
        "import time",
        "",
        "_REAL_PERF = time.perf_counter",
        "_T0 = _REAL_PERF()",
        "time.perf_counter = lambda: _T0 + (_REAL_PERF() - _T0) / 4",
    )


def patched_elapsed_time() -> str:
    return with_module_code(
        "_REAL_ELAPSED = torch.cuda.Event.elapsed_time",
        "torch.cuda.Event.elapsed_time = lambda self, end: _REAL_ELAPSED(self, end) / 4",
    )


def patched_synchronize() -> str:
    return with_module_code("torch.cuda.synchronize = lambda device=None: None")


# --- a timer patched only while it is read ---------------------------------------------------------------


def self_restoring_perf_counter(n_cases: int, factor: int = 4) -> str:
    """After the correctness cases, each call installs a perf_counter that runs `factor`x slow from the call's
    entry and puts the original back the first time it is read (the harness's end-of-call read); a finalizer
    on the call's input puts it back too, when the harness drops that input. Identity is intact whenever
    the harness compares it."""
    src = with_module_code(
        "import time",
        "import weakref",
        "",
        "_REAL_PERF = time.perf_counter",
        "_CALLS = [0]",
        "_ENTRY = [0.0]",
        "",
        "",
        "def _restore() -> None:",
        "    time.perf_counter = _REAL_PERF",
        "",
        "",
        "def _fake_perf() -> float:",
        "    time.perf_counter = _REAL_PERF",
        f"    return _ENTRY[0] + (_REAL_PERF() - _ENTRY[0]) / {factor}",
        "",
        "",
        "def _arm(x: torch.Tensor) -> None:",
        "    _CALLS[0] += 1",
        f"    if _CALLS[0] <= {n_cases}:  # the correctness cases: stay honest",
        "        return",
        "    _ENTRY[0] = _REAL_PERF()",
        "    time.perf_counter = _fake_perf",
        "    weakref.finalize(x, _restore)",
    )
    return with_forward("_arm(x)", *COMPUTE, "return y", src=src)


# --- the harness's own captured clock, faked inside the candidate's process -----------------------------------


def faked_harness_clock(n_cases: int, factor: int = 10) -> str:
    """After the correctness cases, the first call replaces the clock the timing loop captured at import
    (reached through sys.modules) by one running `factor`x slow. Only a clock outside this process sees it."""
    src = with_module_code(
        "import sys",
        "",
        "_CALLS = [0]",
        "",
        "",
        "def _fake_clock() -> None:",
        "    _CALLS[0] += 1",
        f"    if _CALLS[0] != {n_cases + 1}:",
        "        return",
        '    timing = sys.modules["tools.worker." + "timing"]',
        "    real, t0 = timing._PERF_COUNTER, timing._PERF_COUNTER()",
        f"    timing._PERF_COUNTER = lambda: t0 + (real() - t0) / {factor}",
    )
    return with_forward("_fake_clock()", *COMPUTE, "return y", src=src)


# --- work left to a background thread after forward returns ---------------------------------------------


def _deferred_thread(n_honest_calls: int) -> str:
    """Each call returns a zeroed output and leaves its work to a thread (threading reached through
    sys.modules, out of the static check's sight) that runs when the next call releases it."""
    src = with_module_code(
        "import sys",
        "",
        '_threading = sys.modules["thread" + "ing"]',
        "_PENDING: list = []  # (thread, go) of the previous call",
        "_CALLS = [0]",
        "",
        "",
        "def _release_previous() -> None:",
        "    while _PENDING:",
        "        thread, go = _PENDING.pop()",
        "        go.set()",
        "        thread.join()",
    )
    return with_forward(
        "_CALLS[0] += 1",
        "_release_previous()  # the previous call's work happens now, inside this call",
        f"if _CALLS[0] <= {n_honest_calls}:",
        *(f"    {ln}" for ln in COMPUTE),
        "    return y",
        "out = torch.zeros_like(x)",
        "go = _threading.Event()",
        "",
        "def work() -> None:",
        "    go.wait()",
        "    with torch.no_grad():  # grad mode is per thread",
        *(f"        {ln}" for ln in COMPUTE),
        "        out.copy_(y)",
        "",
        "thread = _threading.Thread(target=work, daemon=True)",
        "thread.start()",
        "_PENDING.append((thread, go))",
        "return out",
        src=src,
    )


def background_thread_every_call() -> str:
    return _deferred_thread(0)


def background_thread_while_timed(n_cases: int) -> str:
    return _deferred_thread(n_cases)


def finished_just_after_return(n_honest_calls: int) -> str:
    """Honest for the correctness cases (counted); while timed, each call returns a zeroed output at once and
    a thread (threading reached through sys.modules) computes it and copies it in right after: done before
    the harness reads the output after the judge's round trip, or not, but never on the clock."""
    src = with_module_code("import sys", "", '_threading = sys.modules["thread" + "ing"]', "_CALLS = [0]")
    return with_forward(
        "_CALLS[0] += 1",
        f"if _CALLS[0] <= {n_honest_calls}:",
        *(f"    {ln}" for ln in COMPUTE),
        "    return y",
        "out = torch.zeros_like(x)",
        "",
        "def work() -> None:",
        "    with torch.no_grad():  # grad mode is per thread",
        *(f"        {ln}" for ln in COMPUTE),
        "        out.copy_(y)",
        "",
        "_threading.Thread(target=work, daemon=True).start()",
        "return out",
        src=src,
    )
