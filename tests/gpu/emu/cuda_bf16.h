/* tests/gpu/emu/cuda_bf16.h — stands in for CUDA's header under the warp
 * emulator (cuda_emu_runtime.h). */
#include "cuda_emu_runtime.h"
