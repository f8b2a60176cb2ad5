"""The harness's own small kernels, as PTX loaded through the CUDA driver API into torch's context: no build,
no extension (tools/worker/smem.py's poison, tools/worker/hold.py's hold). Their PTX comes from
`nvcc -arch=compute_75 -ptx`, its ISA version lowered to 7.5 so older drivers load it."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

_CDLL = ctypes.CDLL  # taken at import, before any candidate could replace it

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97


def checked(rc: int, what: str) -> None:
    if rc != 0:
        raise OSError(f"{what} returned CUresult {rc}")


@dataclass
class Kernel:
    """One loaded kernel and the driver's launch entry point."""

    launch: object  # cuLaunchKernel
    function: ctypes.c_void_p


class Driver:
    """The CUDA driver library, bound to the current context's device (torch's)."""

    def __init__(self) -> None:
        self.lib = _CDLL("libcuda.so.1")
        device = ctypes.c_int(0)
        checked(self.lib.cuCtxGetDevice(ctypes.byref(device)), "cuCtxGetDevice")
        self.device = device

    def attribute(self, attribute: int, what: str) -> int:
        value = ctypes.c_int(0)
        checked(
            self.lib.cuDeviceGetAttribute(ctypes.byref(value), attribute, self.device),
            f"cuDeviceGetAttribute({what})",
        )
        return value.value

    def load(self, ptx: bytes, name: str, dynamic_smem: int = 0) -> Kernel:
        """`name` from `ptx`, allowed `dynamic_smem` bytes of dynamic shared memory where that is above 0."""
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        checked(self.lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(ptx)), "cuModuleLoadData")
        checked(
            self.lib.cuModuleGetFunction(ctypes.byref(function), module, name.encode()), "cuModuleGetFunction"
        )
        if dynamic_smem > 0:
            checked(
                self.lib.cuFuncSetAttribute(
                    function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_smem
                ),
                "cuFuncSetAttribute(max dynamic shared memory)",
            )
        return Kernel(self.lib.cuLaunchKernel, function)
