"""Which library a kernel's name says it came from (tools/worker/usage.py `classify_kernel`): the library
policy's shares rest on it. The names are real ones, seen in the H200's profiles."""

from __future__ import annotations

import pytest

from tools.launches import REGION
from tools.worker.usage import DeviceEvent, classify_kernel, tally_kernels

OWN = {"ss09_chunk", "ss09_split"}


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (
            "void ss09_chunk<true>(float const*, float const*, float const*, float const*, float const*)",
            "own",
        ),
        ("ss09_split(float const*, unsigned short*, float*, long long, int, int)", "own"),
        # cuBLAS 13 on the H200: an fp16-in, fp32-out GEMM and a split-K one, named nvjet_*
        ("nvjet_sm90_hss_176x128_64x5_1x2_h_bz_TNN", "gemm"),
        ("nvjet_sm90_hss_64x32_64x16_4x2_h_bz_splitK_TNT", "gemm"),
        ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x64x8_stage3_warpsize2x2x1_ffma", "gemm"),
        ("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4", "gemm"),
        ("cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false>", "gemm"),
        ("Memset (Device)", "copy"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
            "elementwise",
        ),
        (
            "void at::native::(anonymous namespace)::softmax_warp_forward<float, float, float, 10>",
            "elementwise",
        ),
        ("triton_poi_fused_exp_mul_0", "other"),
    ],
)
def test_a_kernel_name_tells_its_kind(name: str, kind: str) -> None:
    assert classify_kernel(name, OWN) == kind


def test_an_own_kernel_named_like_a_library_one_is_still_own() -> None:
    """A candidate that names its kernel nvjet_* or *gemm* gains nothing: its own names are matched first,
    and own time is what the policy asks for anyway."""
    assert classify_kernel("nvjet_fake_scan(float*)", {"nvjet_fake_scan"}) == "own"


def test_annotations_on_the_device_timeline_are_not_kernels() -> None:
    """torch 2.11 on an H100 (2026-12-07) put the forward's record_function range on the device timeline,
    0.43 ms over the 0.40 ms of kernels inside it: counted, it read as 52-69 % "other" library time and
    flagged every honest CUDA candidate `library_policy`. A candidate's own record_function ranges are
    annotations too: neither counts."""
    events = [
        DeviceEvent(REGION, 0.435, True),
        DeviceEvent("my_range", 0.2, True),
        DeviceEvent(REGION, 0.435, False),  # the name alone is enough, should the flag be missing
        DeviceEvent("void ss09_chunk<true>(float const*)", 0.185, False),
        DeviceEvent("nvjet_sm90_hss_176x128_64x5_1x2_h_bz_TNN", 0.141, False),
        DeviceEvent("ss09_split(float const*)", 0.077, False),
    ]
    usage = tally_kernels(events, OWN)
    assert usage["own_calls_per_forward"] == 2
    assert usage["own_share"] == pytest.approx(0.262 / 0.403)
    assert usage["library_share"] == {"gemm": pytest.approx(0.141 / 0.403)}
    assert [name for name, _, _ in usage["top_kernels"]] == [
        "void ss09_chunk<true>(float const*)",
        "nvjet_sm90_hss_176x128_64x5_1x2_h_bz_TNN",
        "ss09_split(float const*)",
    ]
