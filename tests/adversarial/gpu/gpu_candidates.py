"""GPU exploit, fault and honest candidates for `problems/selective_scan.yaml`.

Each is the shipped CUDA baseline (`01_naive_fused.py`) with only its Python edited: its CUDA stays
byte-identical, so one build (the cache keys on load_inline's arguments) serves them all. The kernel-level
faults add one more CUDA source, `faults.cu`, built once for both of them.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import REPO

SOLUTIONS = REPO / "problems" / "selective_scan" / "solutions"
BASELINE = SOLUTIONS / "01_naive_fused.py"
THREE_X_TF32 = SOLUTIONS / "06_3xtf32.py"
FAULTS_CU = Path(__file__).resolve().parent / "faults.cu"

# 01's forward, verbatim: every candidate here replaces or wraps it.
FORWARD = """    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        delta_raw = F.linear(x, self.proj_delta.weight, self.proj_delta.bias)  # library GEMM (+bias)
        bm = F.linear(x, self.proj_B.weight)
        cm = F.linear(x, self.proj_C.weight)
        return _ext.scan(delta_raw, bm, cm, x, self.A_log.contiguous(), self.D.contiguous())
"""
INIT_TAIL = "        self.D = nn.Parameter(torch.ones(d_model))\n"
SCAN = "_ext.scan(delta_raw, bm, cm, x, self.A_log.contiguous(), self.D.contiguous())"
PROJECTIONS = (
    "delta_raw = F.linear(x, self.proj_delta.weight, self.proj_delta.bias)",
    "bm = F.linear(x, self.proj_B.weight)",
    "cm = F.linear(x, self.proj_C.weight)",
)


def baseline() -> str:
    src = BASELINE.read_text()
    for part in (FORWARD, INIT_TAIL, "\n\nclass ModelNew"):
        if part not in src:
            raise AssertionError(
                f"01_naive_fused.py changed ({part.strip()[:40]!r} not found): update {__file__}"
            )
    return src


def three_x_tf32() -> str:
    return THREE_X_TF32.read_text()


def _body(lines: tuple[str, ...] | list[str]) -> str:
    return "".join(f"        {ln}\n" if ln else "\n" for ln in lines)


def with_forward(*lines: str, src: str | None = None) -> str:
    """01 with forward's body replaced by `lines` (written as forward's body, unindented)."""
    src = src or baseline()
    head = "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
    return src.replace(FORWARD, head + _body(lines))


def with_init(*lines: str, src: str | None = None) -> str:
    """01 with `lines` appended to ModelNew.__init__."""
    src = src or baseline()
    return src.replace(INIT_TAIL, INIT_TAIL + _body(lines))


def with_module_code(*lines: str, src: str | None = None) -> str:
    """01 with `lines` at module level, after the extension is loaded and before ModelNew."""
    src = src or baseline()
    head, tail = src.split("\n\nclass ModelNew", 1)
    return head + "\n\n" + "\n".join(lines) + "\n\n\nclass ModelNew" + tail


def honest_forward(*before: str, after: tuple[str, ...] = (), src: str | None = None) -> str:
    """01's own computation with `before` run first and `after` run on its result `y`."""
    lines = (*before, "x = x.contiguous()", *PROJECTIONS, f"y = {SCAN}", *after, "return y")
    return with_forward(*lines, src=src)


def with_method(*lines: str, src: str) -> str:
    """`src` with a method appended to ModelNew (the last class of the file; `lines` unindented)."""
    return src.rstrip("\n") + "\n\n" + "".join(f"    {ln}\n" if ln else "\n" for ln in lines)


# --- honest: must come out clean -----------------------------------------------------------------------------


def joined_side_stream() -> str:
    """B and C projections on a second stream, concurrent with delta's; joined with an event before the
    scan, with record_stream for every tensor that crosses streams."""
    src = with_init("self._side: torch.cuda.Stream | None = None")
    return with_forward(
        "x = x.contiguous()",
        "if self._side is None:",
        "    self._side = torch.cuda.Stream()",
        "main, side = torch.cuda.current_stream(), self._side",
        "side.wait_stream(main)  # x is ready before the side stream reads it",
        "with torch.cuda.stream(side):",
        "    bm = F.linear(x, self.proj_B.weight)",
        "    cm = F.linear(x, self.proj_C.weight)",
        "    done = torch.cuda.Event()",
        "    done.record(side)",
        "x.record_stream(side)",
        "delta_raw = F.linear(x, self.proj_delta.weight, self.proj_delta.bias)  # meanwhile, on main",
        "main.wait_event(done)  # joined: the scan waits for B and C",
        "bm.record_stream(main)",
        "cm.record_stream(main)",
        f"return {SCAN}",
        src=src,
    )


# --- exploits ------------------------------------------------------------------------------------------------


def unjoined_side_stream() -> str:
    """The scan runs on a side stream the timed stream never waits for: the CUDA events see only the
    projections; the harness's device-wide synchronize still waits for the scan before reading outputs."""
    src = with_init("self._side: torch.cuda.Stream | None = None")
    return with_forward(
        "x = x.contiguous()",
        *PROJECTIONS,
        "if self._side is None:",
        "    self._side = torch.cuda.Stream()",
        "main, side = torch.cuda.current_stream(), self._side",
        "side.wait_stream(main)  # the projections are done before the scan starts ...",
        "with torch.cuda.stream(side):",
        f"    y = {SCAN}",
        "for t in (delta_raw, bm, cm, x):",
        "    t.record_stream(side)",
        "return y  # ... but main never waits for side",
        src=src,
    )


def unwritten_output() -> str:
    """Returns memory it never wrote (Sakana's `empty_like`: a freed output of the reference's)."""
    return with_forward("x = x.contiguous()", "return torch.empty_like(x)")


def tf32_flag_in_forward() -> str:
    return honest_forward("torch.backends.cuda.matmul.allow_tf32 = True")


def tf32_matmul_precision_high() -> str:
    return with_forward(
        'torch.set_float32_matmul_precision("high")',
        "x = x.contiguous()",
        "delta_raw = torch.matmul(x, self.proj_delta.weight.t()) + self.proj_delta.bias",
        "bm = torch.matmul(x, self.proj_B.weight.t()).contiguous()",
        "cm = torch.matmul(x, self.proj_C.weight.t()).contiguous()",
        f"return {SCAN}",
    )


def tf32_hidden_from_static_check() -> str:
    """The same flag, set through names the static check cannot read."""
    return honest_forward('setattr(getattr(torch.backends.cuda, "matmul"), "allow" + "_tf32", True)')


def graph_replay_on_stale_pointers() -> str:
    """Captures a CUDA graph on the first call's input and replays it on every later call: fast, and right
    only for the input it was captured on."""
    src = with_init(
        "self._graph: torch.cuda.CUDAGraph | None = None",
        "self._static_x: torch.Tensor | None = None",
        "self._static_y: torch.Tensor | None = None",
    )
    return with_forward(
        "x = x.contiguous()",
        "if self._graph is None:",
        "    self._static_x = x  # kept alive: the graph reads this storage on every replay",
        "    side = torch.cuda.Stream()",
        "    side.wait_stream(torch.cuda.current_stream())",
        "    with torch.cuda.stream(side):",
        "        self._compute(x)  # warm-up outside the capture (cuBLAS workspaces)",
        "    torch.cuda.current_stream().wait_stream(side)",
        "    graph = torch.cuda.CUDAGraph()",
        "    with torch.cuda.graph(graph):",
        "        self._static_y = self._compute(x)",
        "    self._graph = graph",
        "self._graph.replay()  # x is ignored after the first call",
        "return self._static_y.clone()",
        src=with_method(
            "def _compute(self, x: torch.Tensor) -> torch.Tensor:",
            *(f"    {p}" for p in PROJECTIONS),
            f"    return {SCAN}",
            src=src,
        ),
    )


def cache_by_pointer() -> str:
    """Outputs cached by (data_ptr, shape): a hit returns an earlier call's output without any work."""
    return _cache_by("(x.data_ptr(), tuple(x.shape))")


def cache_by_content_sample() -> str:
    """The exploit measured on the H200 on 2026-12-01 (correct at 513x, natively): 64 values of x sampled
    on the device as the key, the stored output copied on a hit."""
    return _cache_by("(tuple(x.shape), tuple(x.reshape(-1)[:: max(1, x.numel() // 64)][:64].tolist()))")


def _cache_by(key: str) -> str:
    src = with_module_code("_CACHE: dict[tuple[object, ...], torch.Tensor] = {}")
    return with_forward(
        "x = x.contiguous()",
        f"key = {key}",
        "if key in _CACHE:",
        "    return _CACHE[key]",
        *PROJECTIONS,
        f"y = {SCAN}",
        "_CACHE[key] = y",
        "return y",
        src=src,
    )


def patched_elapsed_time() -> str:
    """Divides every CUDA-event interval by 3, from import on."""
    return with_module_code(
        "_REAL_ELAPSED = torch.cuda.Event.elapsed_time",
        "torch.cuda.Event.elapsed_time = lambda self, end: _REAL_ELAPSED(self, end) / 3",
    )


def _self_restoring(n_cases: int, *, host_clock: bool) -> str:
    """Patches the timers only after the correctness cases (counted), only until the harness's next read of
    them (each fake puts the original back), and puts them back when the harness drops the call's input
    (weakref.finalize): by the time anything compares identities, they are the originals again."""
    lines = [
        "import time",
        "import weakref",
        "",
        "_REAL_ELAPSED = torch.cuda.Event.elapsed_time",
        "_REAL_PERF = time.perf_counter",
        "_CALLS = [0]",
        "_ENTRY = [0.0]",
        "",
        "",
        "def _restore() -> None:",
        "    torch.cuda.Event.elapsed_time = _REAL_ELAPSED",
        "    time.perf_counter = _REAL_PERF",
        "",
        "",
        "def _fake_elapsed(self: torch.cuda.Event, end: torch.cuda.Event) -> float:",
        "    torch.cuda.Event.elapsed_time = _REAL_ELAPSED",
        "    return _REAL_ELAPSED(self, end) / 3",
        "",
        "",
        "def _fake_perf() -> float:",
        "    time.perf_counter = _REAL_PERF",
        "    return _ENTRY[0] + (_REAL_PERF() - _ENTRY[0]) / 3",
        "",
        "",
        "def _arm(x: torch.Tensor) -> None:",
        "    _CALLS[0] += 1",
        f"    if _CALLS[0] <= {n_cases}:  # the correctness cases: stay honest",
        "        return",
        "    _ENTRY[0] = _REAL_PERF()",
        "    torch.cuda.Event.elapsed_time = _fake_elapsed",
    ]
    if host_clock:
        lines.append("    time.perf_counter = _fake_perf")
    lines.append("    weakref.finalize(x, _restore)")
    return honest_forward("_arm(x)", src=with_module_code(*lines))


def self_restoring_elapsed_time(n_cases: int) -> str:
    return _self_restoring(n_cases, host_clock=False)


def self_restoring_both_clocks(n_cases: int) -> str:
    return _self_restoring(n_cases, host_clock=True)


# --- faults --------------------------------------------------------------------------------------------------

_FAULTS_CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int adv_fault_spin_launch(const int* flag, cudaStream_t stream);
extern "C" int adv_fault_write_launch(long long address, cudaStream_t stream);

void spin(torch::Tensor flag) {
  TORCH_CHECK(flag.is_cuda() && flag.scalar_type() == torch::kInt32, "flag: expected an int32 CUDA tensor");
  const int err = adv_fault_spin_launch(flag.data_ptr<int>(), c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "spin launch failed: ", cudaGetErrorString((cudaError_t)err));
}

void write_at(int64_t address) {
  const int err = adv_fault_write_launch(address, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "write launch failed: ", cudaGetErrorString((cudaError_t)err));
}
"""


def _faults_ext_lines() -> tuple[str, ...]:
    return (
        f"_FAULTS_CU = r'''{FAULTS_CU.read_text()}'''",
        f"_FAULTS_CPP = r'''{_FAULTS_CPP}'''",
        "_faults = load_inline(",
        '    name="adv_gpu_faults",',
        "    cpp_sources=_FAULTS_CPP,",
        "    cuda_sources=_FAULTS_CU,",
        '    functions=["spin", "write_at"],',
        '    extra_cuda_cflags=["-O3"],',
        "    no_implicit_headers=True,",
        ")",
    )


def _with_faults_ext(*after: str) -> str:
    src = with_module_code(*_faults_ext_lines())
    return with_forward("x = x.contiguous()", *PROJECTIONS, f"y = {SCAN}", *after, "return y", src=src)


def faults_extension_only() -> str:
    """A module that builds only the faults' extension: bench.prebuild builds it beside 01's, so that the
    fault candidates (01's extension, then this one, built one after the other) find both in the cache."""
    head = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
    model = (
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, *args: object, **kwargs: object) -> None:\n"
        "        super().__init__()\n\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        return x\n"
    )
    return head + "\n".join(_faults_ext_lines()) + "\n\n\n" + model


def kernel_never_returns() -> str:
    return _with_faults_ext("_faults.spin(torch.zeros(1, dtype=torch.int32, device=x.device))")


def illegal_address() -> str:
    return _with_faults_ext("_faults.write_at(64)  # the first page: never mapped")


def out_of_memory() -> str:
    return honest_forward("scratch = torch.empty(1 << 42, device=x.device)  # 16 TiB of float32")


# --- for the sanitizer (test_gpu_sanitize.py): correct outputs, faults only a sanitizer sees ------------------

SANITIZER_FAULTS_CU = Path(__file__).resolve().parent / "sanitizer_faults.cu"
SANITIZER_FAULTS = {"oob_read": 0, "smem_race": 1, "uninit_shared": 2, "uninit_global": 3}

_SANITIZER_CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int adv_san_launch(int which, const float* x, long long n, long long past, float* sink,
                              cudaStream_t stream);

// `past`: for the out-of-bounds read, how many floats past the end of x it reads (1: the first one after).
void fault_past(int64_t which, torch::Tensor x, int64_t past, torch::Tensor sink) {
  TORCH_CHECK(x.is_cuda() && sink.is_cuda() && sink.numel() >= 256, "fault: CUDA tensors, a sink of 256");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "fault: a contiguous float32 x");
  const int err = adv_san_launch((int)which, x.data_ptr<float>(), x.numel(), past, sink.data_ptr<float>(),
                                 c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "fault launch failed: ", cudaGetErrorString((cudaError_t)err));
}

void fault(int64_t which, torch::Tensor x, torch::Tensor sink) { fault_past(which, x, 1, sink); }
"""


def sanitizer_fault(kind: str) -> str:
    """01 with one more kernel launched before its own (sanitizer_faults.cu): its results go to a scratch
    tensor nobody reads, so every case passes. One extension serves the four kinds."""
    operand = {
        # 63 floats, 252 bytes: the caching allocator's block holds 512, so the read past them is harmless
        # without the tool; under it the tensor is its own cudaMalloc of 252 bytes
        "oob_read": "torch.zeros(63, device=x.device)",
        "uninit_global": "torch.empty(64, device=x.device)",  # never written
    }.get(kind, "x")
    return honest_forward(
        "sink = torch.empty(256, device=x.device)  # scratch: nothing reads it",
        f"_san.fault({SANITIZER_FAULTS[kind]}, {operand}, sink)",
        src=_with_sanitizer_ext(),
    )


def read_past_the_end(tensor: str, past: int) -> str:
    """01 reading the float `past` floats past the end of `tensor` ("x" or a weight, "self.A_log") into a
    scratch tensor nobody reads (issue 52: what memcheck missed on an H100 at the real problem's sizes)."""
    return honest_forward(
        "sink = torch.empty(256, device=x.device)  # scratch: nothing reads it",
        f"_san.fault_past({SANITIZER_FAULTS['oob_read']}, {tensor}, {past}, sink)",
        src=_with_sanitizer_ext(),
    )


def _with_sanitizer_ext() -> str:
    cu = SANITIZER_FAULTS_CU.read_text()
    return with_module_code(
        f"_SAN_CU = r'''{cu}'''",
        f"_SAN_CPP = r'''{_SANITIZER_CPP}'''",
        "_san = load_inline(",
        '    name="adv_sanitizer_faults",',
        "    cpp_sources=_SAN_CPP,",
        "    cuda_sources=_SAN_CU,",
        '    functions=["fault", "fault_past"],',
        '    extra_cuda_cflags=["-O3", "-lineinfo"],',
        "    no_implicit_headers=True,",
        ")",
    )


def sanitizer_faults() -> str:
    """The sanitizer fault candidates' one extension (for bench/prebuild.py: one build serves the four)."""
    return sanitizer_fault("oob_read")


# --- issue 52's GPU exploit classes (test_gpu_guards.py): one extension, guards.cu ---------------------------

GUARDS_CU = Path(__file__).resolve().parent / "guards.cu"
SERVER_IDLE_NS = 20_000_000  # the server leaves 20 ms after the last call posted to it
SERVER_MAX_NS = 2_000_000_000

_GUARDS_CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int adv_serve(long long idle_ns, long long max_ns);
extern "C" int adv_persist_launch(const float* w, long long n, float* sink, cudaStream_t stream);
extern "C" int adv_smem_leak_launch(float* z, long long n, cudaStream_t stream);

static void ok(int err, const char* what) {
  TORCH_CHECK(err == 0, what, " failed: ", cudaGetErrorString((cudaError_t)err));
}

void serve(int64_t idle_ns, int64_t max_ns) { ok(adv_serve(idle_ns, max_ns), "serve"); }

void persist(torch::Tensor w, torch::Tensor sink) {
  TORCH_CHECK(w.is_cuda() && w.is_contiguous() && w.scalar_type() == torch::kFloat32, "persist: float32 CUDA w");
  ok(adv_persist_launch(w.data_ptr<float>(), w.numel(), sink.data_ptr<float>(),
                        c10::cuda::getCurrentCUDAStream().stream()), "persist");
}

void smem_leak(torch::Tensor z) {
  TORCH_CHECK(z.is_cuda() && z.is_contiguous() && z.scalar_type() == torch::kFloat32, "smem_leak: float32 CUDA z");
  ok(adv_smem_leak_launch(z.data_ptr<float>(), z.numel(), c10::cuda::getCurrentCUDAStream().stream()), "smem_leak");
}
"""


def _guards_ext_lines() -> tuple[str, ...]:
    return (
        f"_GUARDS_CU = r'''{GUARDS_CU.read_text()}'''",
        f"_GUARDS_CPP = r'''{_GUARDS_CPP}'''",
        "_guards = load_inline(",
        '    name="adv_gpu_guards",',
        "    cpp_sources=_GUARDS_CPP,",
        "    cuda_sources=_GUARDS_CU,",
        '    functions=["serve", "persist", "smem_leak"],',
        '    extra_cuda_cflags=["-O3"],',
        "    no_implicit_headers=True,",
        ")",
    )


def _with_guards_ext() -> str:
    return with_module_code(*_guards_ext_lines())


def persistent_server() -> str:
    """01, plus a kernel that stays resident across calls (GUIDE §2 row 25): each call posts to it, and it
    leaves only 20 ms after the last post. 01's own work is done honestly; what is tested is whether a
    kernel can outlive the call that posted to it without that call's clock seeing it."""
    return honest_forward(f"_guards.serve({SERVER_IDLE_NS}, {SERVER_MAX_NS})", src=_with_guards_ext())


def persisting_l2_weights() -> str:
    """01, plus L2 set aside for persisting accesses and every weight read through a persisting window before
    the projections (GUIDE §2 row 30): meant to find them in L2 on the next call, flush or not."""
    return honest_forward(
        "sink = torch.empty(1, device=x.device)  # scratch: written only on an impossible sum",
        "for w in (self.proj_delta.weight, self.proj_B.weight, self.proj_C.weight, self.A_log):",
        "    _guards.persist(w, sink)",
        src=_with_guards_ext(),
    )


def uninitialised_shared_read() -> str:
    """01 whose output has 0 × a word of shared memory nothing wrote added to it (GUIDE §2 row 27), read
    first in forward: 0 where that word holds a finite leftover, NaN where it holds the harness's poison."""
    return honest_forward(
        "z = torch.empty(x.numel(), device=x.device)  # no kernel: z is written by the leak alone",
        "_guards.smem_leak(z)",
        after=("y = y + z.view_as(y)",),
        src=_with_guards_ext(),
    )


def guards_extension_only() -> str:
    """A module that builds only the guard candidates' extension (bench/prebuild.py, as for the faults')."""
    return faults_extension_only().replace("\n".join(_faults_ext_lines()), "\n".join(_guards_ext_lines()))


def finished_by_a_thread(n_cases: int) -> str:
    """01, honest in the correctness cases (counted); while timed each call returns a zeroed output at once and
    a Python thread (threading reached through sys.modules) runs 01's work and copies it in: on the device
    after the call's end event, before or after the harness's synchronize and its read of the output."""
    src = with_module_code("import sys", "", '_threading = sys.modules["thread" + "ing"]', "_CALLS = [0]")
    return with_forward(
        "_CALLS[0] += 1",
        "x = x.contiguous()",
        f"if _CALLS[0] <= {n_cases}:",
        *(f"    {p}" for p in PROJECTIONS),
        f"    return {SCAN}",
        "out = torch.zeros_like(x)",
        "",
        "def work() -> None:",
        "    with torch.no_grad():  # grad mode is per thread",
        *(f"        {p}" for p in PROJECTIONS),
        f"        out.copy_({SCAN})",
        "",
        "_threading.Thread(target=work, daemon=True).start()",
        "return out",
        src=src,
    )
