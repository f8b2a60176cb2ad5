"""Probe: is the selective-scan reference capturable in a CUDA graph, and how steady are its replays?"""

import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, "problems/selective_scan")
from reference import Model  # noqa

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
flush = torch.empty(256 * 1024 * 1024 // 4, device=dev)
out = {}
shapes = [(16, 1024, 1024, 16), (8, 4096, 768, 16), (4, 2048, 2048, 16)]


def time_calls(fn, n):
    ts = []
    for _ in range(n):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return ts


for dtype in (torch.float32, torch.float64):
    for b, l, d, n in shapes:
        key = f"{b}x{l}x{d}x{n}/{str(dtype)[6:]}"
        if dtype == torch.float64 and b != 16:
            continue
        torch.manual_seed(0)
        m = Model(d, n).to(dev, dtype)
        x = torch.randn(b, l, d, device=dev, dtype=dtype)
        rec = {}
        with torch.no_grad():
            m(x)
            torch.cuda.synchronize()
            eager = [statistics.median(time_calls(lambda: m(x), 5)) for _ in range(5)]
            rec["eager_window_medians_ms"] = eager
            static_x = x.clone()
            try:
                t0 = time.perf_counter()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(2):
                        m(static_x)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    static_y = m(static_x)
                torch.cuda.synchronize()
                rec["capture_s"] = time.perf_counter() - t0
                g.replay()
                torch.cuda.synchronize()
                ref = m(x)
                rec["graph_vs_eager_maxabs"] = (static_y - ref).abs().max().item()
                # new contents into the static input
                x2 = torch.randn_like(x)
                static_x.copy_(x2)
                g.replay()
                torch.cuda.synchronize()
                rec["graph_new_inputs_maxabs"] = (static_y - m(x2)).abs().max().item()
                rec["graph_window_medians_ms"] = [
                    statistics.median(time_calls(g.replay, 10)) for _ in range(8)
                ]
                rec["mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
                del g
            except Exception as exc:
                rec["capture_error"] = repr(exc)
        out[key] = rec
        print(key, json.dumps(rec), flush=True)
        del m, x
        torch.cuda.empty_cache()
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "graph_ref.json"), "w"), indent=1)
