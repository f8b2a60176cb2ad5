"""Adversarial and honest candidates: the shipped CPU baseline with only its Python edited.

Every candidate here except `template_explosion` keeps the baseline's C++ byte-identical, so the whole
suite builds it once (the build cache is keyed on load_inline's arguments).
"""

from __future__ import annotations

from tests.candidates.scan_variants import baseline, replace, with_forward_tail

FORWARD = "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        x = x.contiguous()\n"
EXT = "\n_ext = load_inline("


def with_forward_head(*lines: str) -> str:
    """The baseline with `lines` run first in forward (indented as its body)."""
    body = "".join(f"        {ln}\n" for ln in lines)
    return replace(FORWARD, FORWARD + body)


def with_module_code(*lines: str) -> str:
    """The baseline with `lines` at module level, after the extension is loaded."""
    src = baseline()
    head, tail = src.split("\n\nclass ModelNew", 1)
    return head + "\n\n" + "\n".join(lines) + "\n\n\nclass ModelNew" + tail


# --- caches that give back an earlier output: caught by the re-check of timed outputs -------------------


def _cache(key: str) -> str:
    src = with_forward_head(
        f"key = {key}",
        "if key in _CACHE:",
        "    print('cache hit', flush=True)",
        "    return _CACHE[key]",
    )
    src = src.replace("\n        return y\n", "\n        _CACHE[key] = y\n        return y\n")
    return src.replace(EXT, "\n_CACHE: dict = {}\n" + EXT, 1)


def cache_by_shape() -> str:
    return _cache("tuple(x.shape)")


def cache_by_pointer() -> str:
    return _cache("(x.data_ptr(), tuple(x.shape))")


def cache_by_id() -> str:
    return _cache("(id(x), tuple(x.shape))")


def cache_by_version() -> str:
    return _cache("(x._version, tuple(x.shape))")


def cache_by_content_sample() -> str:
    """The measured exploit (H200, 2026-12-01: correct at 513x): 64 values of x sampled as the key."""
    return _cache("(tuple(x.shape), tuple(x.reshape(-1)[:: max(1, x.numel() // 64)][:64].tolist()))")


def cache_by_content_sum() -> str:
    """Keyed on what a cyclic shift of the contents keeps (their sum): hits, and hands back stale outputs."""
    return _cache("(tuple(x.shape), round(float(x.double().sum()), 6))")


def correct_only_while_counted(honest_calls: int) -> str:
    """Honest for its first `honest_calls` forwards (the cases, the warm-up, the first timed calls), then a
    cheap wrong answer: what a candidate that counts calls to spot the end of checking does."""
    src = with_forward_head(
        "_CALLS[0] += 1",
        f"if _CALLS[0] > {honest_calls}:",
        "    return x * self.D",
    )
    return src.replace(EXT, "\n_CALLS = [0]\n" + EXT, 1)


# --- reaching for the truth -------------------------------------------------------------------------------


def gc_scan() -> str:
    """Looks for any float64 tensor (truth is float64) in its process; returns it, else zeros."""
    return with_forward_head(
        "import gc",
        "found = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.dtype == torch.float64]",
        "print(f'gc found {len(found)} float64 tensors', flush=True)",
        "if found:",
        "    return found[0].float()",
        "return torch.zeros_like(x)",
    )


def read_private_truth() -> str:
    """Lists and opens the parent's private folder (truth files there before this harness moved them)."""
    return with_module_code(
        "import glob",
        "import os",
        "_PRIVATE = os.path.join(os.getcwd(), '..', 'private')",
        "print(f'truth files visible: {len(glob.glob(os.path.join(_PRIVATE, \"*.truth.pt\")))}', flush=True)",
        "for _name in ('case_0.truth.pt', 'truth_request.json'):",
        "    try:",
        "        open(os.path.join(_PRIVATE, _name), 'rb').read()",
        "        print('read private file', _name, flush=True)",
        "    except OSError as exc:",
        "        print('refused:', exc, flush=True)",
    )


def dump_environment() -> str:
    """Prints everything it can read about its evaluation: environment, request, its own dir."""
    return with_module_code(
        "import os",
        "import pathlib",
        "print('ENV', dict(os.environ), flush=True)",
        "print('REQUEST', pathlib.Path('request.json').read_text(), flush=True)",
        "print('FILES', sorted(os.listdir('.')), sorted(os.listdir('..')), flush=True)",
    )


# --- sandbox escapes the runtime guard sees -------------------------------------------------------------


def write_outside(path: str) -> str:
    return with_module_code(
        "try:",
        f"    open({path!r}, 'w').write('escaped')",
        "except OSError as exc:",
        "    print('refused:', exc, flush=True)",
    )


def run_subprocess() -> str:
    """`os.system` reached through getattr: the static check sees dynamic code, the guard the spawn."""
    return with_module_code(
        "try:",
        "    getattr(__import__('os'), 'system')('true')",
        "except OSError as exc:",
        "    print('refused:', exc, flush=True)",
    )


def open_socket() -> str:
    return with_module_code(
        "import socket",
        "try:",
        "    socket.socket().connect(('127.0.0.1', 9))",
        "except OSError as exc:",
        "    print('refused:', exc, flush=True)",
    )


# --- faults ---------------------------------------------------------------------------------------------


def kill_parent() -> str:
    return with_forward_tail("import os, signal", "os.kill(os.getppid(), signal.SIGKILL)")


def kill_own_group() -> str:
    return with_forward_tail("import os, signal", "os.killpg(0, signal.SIGKILL)")


def setsid_sleeper(seconds: int) -> str:
    """Starts a detached sleeper through libc (no Python audit event) and then behaves."""
    return with_module_code(
        "import ctypes",
        f"ctypes.CDLL(None).system(b'setsid sleep {seconds} >/dev/null 2>&1 < /dev/null &')",
    )


def output_spam(megabytes: int = 100) -> str:
    return with_module_code(
        "import sys",
        "_line = 'spam ' * 200 + '\\n'",
        f"for _ in range({megabytes} * (1 << 20) // len(_line)):",
        "    sys.stdout.write(_line)",
        "sys.stdout.flush()",
    )


def tamper_with(path: str) -> str:
    """Appends to a file through libc, past the audit hook (as native code in an extension could)."""
    return with_forward_head(
        "import ctypes, os",
        "_libc = ctypes.CDLL(None)",
        f"_fd = _libc.open({path.encode()!r}, os.O_WRONLY | os.O_APPEND)",
        "_libc.write(_fd, b'\\n# tampered\\n', 12)",
        "_libc.close(_fd)",
    )


TEMPLATE_EXPLOSION = r"""
template <class T> struct Lft {};
template <class T> struct Rgt {};
// 2^N distinct instantiations: compile time and memory grow without bound.
template <int N, class T> struct Boom {
  static constexpr long v = Boom<N - 1, Lft<T>>::v + Boom<N - 1, Rgt<T>>::v;
};
template <class T> struct Boom<0, T> { static constexpr long v = 1; };
long boom() { return Boom<60, int>::v; }
"""


def template_explosion() -> str:
    src = replace('CPP_SOURCE = r"""\n', 'CPP_SOURCE = r"""\n' + TEMPLATE_EXPLOSION)
    return src.replace('name="scan_cpu_baseline"', 'name="scan_cpu_template_boom"')


# --- honest candidates: must come out clean ---------------------------------------------------------------


def heavy_legal_python() -> str:
    """Shape checks, a constants dict, helper functions, .contiguous() everywhere, getattr on itself."""
    src = with_module_code(
        "SETTINGS = {'min_rank': 3, 'dtype': torch.float32, 'names': ('x',)}",
        "",
        "",
        "def _check(t: torch.Tensor, name: str) -> torch.Tensor:",
        "    if t.dim() != SETTINGS['min_rank'] or t.dtype != SETTINGS['dtype']:",
        "        raise ValueError(f'{name}: expected a 3-d float32 tensor, got {tuple(t.shape)} {t.dtype}')",
        "    return t if t.is_contiguous() else t.contiguous()",
        "",
        "",
        "def _proj(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:",
        "    return F.linear(x, layer.weight, layer.bias).contiguous()",
    )
    return src.replace(
        "        x = x.contiguous()\n",
        "        x = _check(x, SETTINGS['names'][0])\n"
        "        assert x.shape[-1] == self.d_model, 'd_model mismatch'\n"
        "        skip = getattr(self, 'D')\n"
        "        _ = _proj(x[:, :1], self.proj_B).shape\n",
    )


# --- output type, input mutation, timers ---------------------------------------------------------------


def lazy_subclass() -> str:
    return with_module_code("class Lazy(torch.Tensor):", "    pass").replace(
        "\n        return y\n", "\n        return y.as_subclass(Lazy)\n"
    )


def mutates_input() -> str:
    return with_forward_tail("x.add_(1.0)")


def patches_timer() -> str:
    return with_module_code("import time", "time.perf_counter = lambda: 0.0")
