/* tests/gpu/emu/cuda_runtime.h — stands in for CUDA's header when
 * kernels/cuda.cu is compiled for the warp emulator (cuda_emu_runtime.h). */
#include "cuda_emu_runtime.h"
