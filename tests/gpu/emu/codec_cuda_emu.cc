/*
 * codec_cuda_emu.cc — the CUDA codec's public entry points (zipcclCompressCuda,
 * zipcclDecompressCuda, zipcclCudaAvailable, zipcclCudaWorkspaceSize) over the
 * warp emulator: comm/codec/codec_cuda.cu in its emulated build
 * (ZIPCCL_CUDA_EMU, as tests/gpu/cuda_emu.cc runs its kernels) with the entry
 * points kept, so the emulated CUDA device of tests/gpu/emu codes ZipCCL's
 * compressed calls with the very kernels a GPU runs.
 */
#include "cuda_emu_runtime.h"

#define ZIPCCL_CUDA_EMU 1
#define ZIPCCL_CUDA_EMU_ENTRY_POINTS 1
#include "../../../comm/codec/codec_cuda.cu"
