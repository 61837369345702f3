"""A Numba program that takes and gives back device memory step by step on
the fake GPU (NUMBA_CUDA_DRIVER=build/fakegpu/libcuda.so.1). After each step
it prints `step NAME` and waits for a line on stdin, so that another process
(tests/integration/fakegpu_numba_memory.sh) can check fakegpu-smi in between.
It checks its own data as it goes and prints `error ...` and exits 1 on a
mismatch. With the argument `hold` it stops after allocating, to be killed."""
import sys

import numpy as np
from numba import cuda

MIB = 1 << 20


def step(name):
    print("step", name, flush=True)
    if not sys.stdin.readline():
        sys.exit(0)  # the checker went away


def check(cond, what):
    if not cond:
        print("error", what, flush=True)
        sys.exit(1)


def free_now():
    # Numba defers frees; flush them so the driver sees them now.
    cuda.current_context().memory_manager.deallocations.clear()


def main():
    hold = len(sys.argv) > 1 and sys.argv[1] == "hold"
    ctx = cuda.current_context()
    step("context")                                   # 300: the context

    host = np.arange(16 * MIB, dtype=np.uint32)       # 64 MiB
    d = cuda.to_device(host)
    step("to_device_64")                              # 364
    if hold:
        step("hold")
        return

    e = cuda.device_array(25 * MIB, dtype=np.float32)  # 100 MiB
    step("device_array_100")                          # 464

    p = cuda.pinned_array(8 * MIB, dtype=np.uint8)    # host memory: not counted
    m = cuda.managed_array(8 * MIB, dtype=np.uint32)  # 32 MiB, counted
    step("pinned_8_managed_32")                       # 496

    # Copies: host -> device -> device -> host, through pinned and managed.
    e2 = cuda.device_array_like(d)
    e2.copy_to_device(d)
    back = e2.copy_to_host()
    check(np.array_equal(back, host), "device-to-device copy lost data")
    p[:] = 7
    dp = cuda.to_device(p)
    check(int(dp.copy_to_host().sum()) == 7 * p.size, "pinned copy lost data")
    m[:] = 3
    check(int(m.sum()) == 3 * m.size, "managed memory not host-visible")
    del dp
    free_now()
    step("copies")                                    # 560: e2 (64) still held

    del d, e, e2
    free_now()
    step("freed")                                     # 332: context + managed

    ctx.reset()                                       # frees the managed array too
    del m, p
    step("reset")                                     # 300: the context only

    cuda.close()                                      # primary context released
    step("closed")                                    # not listed

    d = cuda.to_device(host)
    step("again_64")                                  # 364 in a new context


if __name__ == "__main__":
    main()
