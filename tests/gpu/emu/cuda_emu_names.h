/* tests/gpu/emu/cuda_emu_names.h — forced into kernels/cuda.cu's emulated
 * build and into test_model.c's (-include): the CUDA table's entry points get
 * an _emu suffix, so the emulated table links beside the library's own
 * (kernels/cuda.cu, or kernels/cpu.c's stubs without CUDA). */
#define zrt_kernels_cuda zrt_kernels_cuda_emu
#define zrt_kernels_cuda_bf16 zrt_kernels_cuda_bf16_emu
#define zrt_cuda_bind zrt_cuda_bind_emu
#define zrt_cuda_error zrt_cuda_error_emu
#define zrt_cuda_device_name zrt_cuda_device_name_emu
#define zrt_cuda_device zrt_cuda_device_emu
