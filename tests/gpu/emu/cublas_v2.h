/* tests/gpu/emu/cublas_v2.h — stands in for cuBLAS's header under the warp
 * emulator (cuda_emu_runtime.h). */
#include "cuda_emu_runtime.h"
