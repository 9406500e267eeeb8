# ZipCCL runtime — one Makefile for everything.
#
#   make deps        install what is missing (Debian packages, PyPI test references)
#   make             build libraries, programs and tests into build/
#   make test        run the whole suite (normal build + ASan/UBSan build)
#   make run         train the embedded default (tiny Llama, 4 ranks, compressed)
#   make run-moe     train a tiny Qwen3-MoE (8 experts, top-2, 4 ranks, EP 2)
#   make fuzz        run the fuzzers (codec, loaders) for FUZZ_SECONDS each (libFuzzer)
#   make test-gpu    GPU tests + GPU benchmarks (needs a CUDA device)
#   make gpu-bundle  pack them for a GPU machine without our packages
#   make bench       CPU codec benchmark
#
# Layout: comm/ (libzipccl: public headers at its top, then core/ transport/
# algo/ tune/ codec/), kernels/ models/ runtime/ (libzrt), programs in
# comm/bench/*.c and runtime/{train,export_hf,supervise}.c, tests in tests/test_*.{c,sh,py}.

BUILD      ?= build
CC         ?= gcc
SAN        ?=
NO_CUDA    ?=
NVCC       ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH  ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90

# Read once per make invocation, when the Makefile is parsed. The targets that
# install dependencies first (test, run, test-long, ...) therefore build in a
# sub-make started after `make deps`, which parses again and finds mpicc.
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
SUBMAKE    := $(MAKE) --no-print-directory
# the builds that targets start themselves (test, run, ...) use every core
# (a make -jN of the caller's passes its own jobserver down instead)
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
BUILDMAKE  = $(SUBMAKE) $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS))

COMM_DIRS  := comm/base comm/core comm/run comm/agree comm/transport comm/algo comm/tune comm/codec
# device/: the one device model (memory, streams, events) under both the
# kernel tables and ZipCCL; built into libzipccl, which ships with it.
DEV_DIRS   := device
CPPFLAGS   := -Idevice -Icomm $(addprefix -I,$(COMM_DIRS)) -Ikernels -Imodels -Iruntime -D_GNU_SOURCE $(MPI_CFLAGS)
CFLAGS     ?= -O2 -g
override CFLAGS += -std=c11 -Wall -Wextra -Werror -fopenmp -pthread $(SAN)
LDLIBS     := $(MPI_LIBS) -lopenblas -lyaml -ljansson -lzstd -llz4 -lxxhash -lm -lpthread -fopenmp

ifeq ($(NO_CUDA),)
ifneq ($(NVCC),)
HAVE_CUDA  := 1
endif
endif

ifdef HAVE_CUDA
CPPFLAGS   += -DZIPCCL_HAVE_CUDA=1 -I$(CUDA_HOME)/include
NVCCFLAGS  ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror,-fPIC
CU_SRC     := $(wildcard $(addsuffix /*.cu,$(DEV_DIRS) $(COMM_DIRS)) kernels/*.cu)
CU_OBJ     := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(CU_SRC))
LDLIBS     += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Wl,-rpath,$(CUDA_HOME)/lib64 \
              -Wl,-rpath,$(CUDA_HOME)/lib -lcudart -lcublas -lnccl -lstdc++
endif

# cuDNN's fused attention (kernels/attention_cudnn.cpp): built against the
# cuDNN frontend's headers (PyPI's nvidia-cudnn-frontend, which make deps
# installs) and cudnn.h where both are found, cuDNN loaded at run time;
# otherwise the same file builds its stubs (the flash kernels run)
PYTHON     ?= python3
CUDNN_FE   := $(shell $(PYTHON) -c "import sysconfig,os; p=sysconfig.get_paths()['purelib']+'/include'; print(p if os.path.exists(p+'/cudnn_frontend.h') else '')" 2>/dev/null)
CUDNN_H    := $(firstword $(wildcard $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h))
CUDNN_CXXFLAGS := $(if $(and $(CUDNN_FE),$(CUDNN_H)),-DZRT_CUDNN_SDPA -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING \
                  -isystem $(CUDNN_FE) -isystem $(dir $(CUDNN_H)))

COMM_SRC   := $(wildcard $(addsuffix /*.c,$(DEV_DIRS) $(COMM_DIRS)))
RT_SRC     := $(filter-out runtime/train.c runtime/export_hf.c runtime/supervise.c,$(wildcard kernels/*.c models/*.c runtime/*.c))
COMM_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(COMM_SRC)) $(filter $(BUILD)/obj/comm/% $(BUILD)/obj/device/%,$(CU_OBJ))
RT_OBJ     := $(patsubst %.c,$(BUILD)/obj/%.o,$(RT_SRC)) $(filter $(BUILD)/obj/kernels/%,$(CU_OBJ)) \
              $(if $(HAVE_CUDA),$(BUILD)/obj/kernels/attention_cudnn.o)
LIBZIPCCL  := $(BUILD)/libzipccl.a
LIBZRT     := $(BUILD)/libzrt.a

BENCH_SRC  := $(wildcard comm/bench/*.c)
# comm/bench/coll/*.c: one CollTest per collective, linked into zipccl-bench (not programs).
BENCH_COLL := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard comm/bench/coll/*.c))
PROGS      := $(patsubst comm/bench/%.c,$(BUILD)/zipccl-%,$(BENCH_SRC))
PROGS      := $(subst zipccl-coll_bench,zipccl-bench,$(subst zipccl-codec_bench,zipccl-codec-bench,$(PROGS)))
ifneq ($(wildcard runtime/train.c),)
PROGS      += $(BUILD)/train
endif
ifneq ($(wildcard runtime/export_hf.c),)
PROGS      += $(BUILD)/export-hf
endif
ifneq ($(wildcard runtime/supervise.c),)
PROGS      += $(BUILD)/supervise
endif
TEST_SRC   := $(wildcard tests/test_*.c)
TESTS      := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)
REPLAYS    := $(patsubst tests/fuzz/%.c,$(BUILD)/tests/replay_%,$(FUZZ_SRC))
# GPU test programs: tests/gpu/*.cu -> BUILD/gpu/* (run by scripts/test_gpu.sh);
# tests/gpu/*.cc -> BUILD/gpu/* (host emulation of the CUDA codec, plain C++,
# run in the suite by tests/test_codec_cuda_emu.sh). Not in sanitizer builds.
GPU_PROGS  := $(if $(SAN),,$(patsubst tests/gpu/%.cc,$(BUILD)/gpu/%,$(wildcard tests/gpu/*.cc)))
# ... and the codec's emulation once more under UBSan (the suite runs this
# one; ASan cannot follow the emulator's coroutine stacks)
GPU_PROGS  += $(if $(SAN),,$(BUILD)/gpu/cuda_emu_ubsan)
# ... and the model's CUDA kernel table and ZipCCL's CUDA device under the
# same emulator, checked by test_model's and test_coll_device's CUDA checks
# (tests/test_model_cuda_emu.sh, tests/test_coll_device_cuda_emu.sh).
GPU_PROGS  += $(if $(SAN),,$(BUILD)/gpu/test_model_emu $(BUILD)/gpu/test_coll_device_emu \
                            $(BUILD)/gpu/train_emu)
ifdef HAVE_CUDA
GPU_PROGS  += $(patsubst tests/gpu/%.cu,$(BUILD)/gpu/%,$(wildcard tests/gpu/*.cu))
endif

# Keep intermediate objects (the fuzz replays' objects are chained targets):
# make would delete them after the suite and print that as its last line.
.SECONDARY:

.PHONY: all deps test test-asan test-long run run-moe fuzz test-gpu gpu-bundle bench clean
all: $(LIBZIPCCL) $(LIBZRT) $(PROGS) $(TESTS) $(REPLAYS) $(GPU_PROGS)

DEPS ?= scripts/deps.sh
deps:
	@$(DEPS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out $(MPI_CFLAGS),$(CPPFLAGS)) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

# host C++ (graph building; it runs once per shape): -O1 keeps the
# frontend's templates quick to compile
$(BUILD)/obj/kernels/attention_cudnn.o: kernels/attention_cudnn.cpp
	@mkdir -p $(dir $@)
	$(CXX) -Idevice -Ikernels $(CUDNN_CXXFLAGS) -isystem $(CUDA_HOME)/include -std=c++17 -O1 -g0 -fPIC \
	  -Wall -Wextra -Werror -MMD -MP -c $< -o $@

$(LIBZIPCCL): $(COMM_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBZRT): $(RT_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

LINK = $(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/zipccl-codec-bench: $(BUILD)/obj/comm/bench/codec_bench.o $(LIBZIPCCL)
	$(LINK)
$(BUILD)/zipccl-bench: $(BUILD)/obj/comm/bench/coll_bench.o $(BENCH_COLL) $(LIBZIPCCL)
	$(LINK)
$(BUILD)/zipccl-%: $(BUILD)/obj/comm/bench/%.o $(LIBZIPCCL)
	$(LINK)
$(BUILD)/train: $(BUILD)/obj/runtime/train.o $(LIBZRT) $(LIBZIPCCL)
	$(LINK)
$(BUILD)/export-hf: $(BUILD)/obj/runtime/export_hf.o $(LIBZRT) $(LIBZIPCCL)
	$(LINK)
$(BUILD)/supervise: $(BUILD)/obj/runtime/supervise.o $(LIBZRT) $(LIBZIPCCL)
	$(LINK)
# Tests of the communication library alone link only libzipccl, so a half-built
# runtime never blocks them.
COMM_TESTS := $(filter $(BUILD)/tests/test_codec% $(BUILD)/tests/test_coll%,$(TESTS))
$(COMM_TESTS): $(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(LIBZIPCCL)
	@mkdir -p $(dir $@)
	$(LINK)
$(filter-out $(COMM_TESTS),$(TESTS)): $(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(LIBZRT) $(LIBZIPCCL)
	@mkdir -p $(dir $@)
	$(LINK)
$(BUILD)/tests/replay_%: $(BUILD)/obj/tests/fuzz/%.o $(BUILD)/obj/tests/fuzz/replay_main.o $(LIBZRT) $(LIBZIPCCL)
	@mkdir -p $(dir $@)
	$(LINK)
$(BUILD)/gpu/%: tests/gpu/%.cc comm/codec/codec_cuda.cu $(wildcard tests/gpu/*.h) $(LIBZIPCCL)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) -O2 -g -std=c++17 -Wall -Wextra -Werror $< $(LIBZIPCCL) $(LDLIBS) -o $@
$(BUILD)/gpu/cuda_emu_ubsan: tests/gpu/cuda_emu.cc comm/codec/codec_cuda.cu $(wildcard tests/gpu/*.h) $(LIBZIPCCL)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) -O1 -g -std=c++17 -Wall -Wextra -Werror -fsanitize=undefined -fno-sanitize-recover=undefined \
	    $< $(LIBZIPCCL) $(LDLIBS) -o $@
# CUDA sources as plain C++ for the warp emulator (tests/gpu/warp_emu.h): each
# launch k<<<g, b>>>(args) rewritten to emu::launcher(k, g, b)(args), the
# CUDA headers tests/gpu/emu's stand-ins (first on the include path). Their
# objects define the very symbols of the library's CUDA objects (or stubs),
# so, linked ahead of the archives, they take their place: the model's table
# (kernels/cuda.cu), the CUDA device (device/device_cuda.cu), ZipCCL's reduction kernels
# of transport_nccl_kernels.cu, the codec's entry points:
# tests/gpu/emu/codec_cuda_emu.cc).
EMU_CPPFLAGS := -Itests/gpu/emu $(filter-out -DZIPCCL_HAVE_CUDA=1 -I$(CUDA_HOME)/include,$(CPPFLAGS))
EMU_CXX       = $(CXX) $(EMU_CPPFLAGS) -O1 -g -std=c++17 -Wall -Wextra -Werror -MMD -MP
$(BUILD)/obj/emu/%.cc: %.cu
	@mkdir -p $(dir $@)
	{ echo '#line 1 "$<"'; sed -E 's/([A-Za-z_][A-Za-z0-9_]*)<<<(.*)>>>\(/emu::launcher(\1, \2)(/' $<; } > $@
$(BUILD)/obj/emu/%.o: $(BUILD)/obj/emu/%.cc
	$(EMU_CXX) -c $< -o $@
$(BUILD)/obj/emu/codec_cuda_emu.o: tests/gpu/emu/codec_cuda_emu.cc
	@mkdir -p $(dir $@)
	$(EMU_CXX) -c $< -o $@
EMU_DEVICE := $(BUILD)/obj/emu/device/device_cuda.o
EMU_ZIPCCL := $(EMU_DEVICE) $(addprefix $(BUILD)/obj/emu/,codec_cuda_emu.o \
                comm/transport/transport_nccl_kernels.o)
$(BUILD)/obj/emu/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(EMU_CPPFLAGS) -DZIPCCL_TEST_CUDA_EMU=1 $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/gpu/test_model_emu: $(BUILD)/obj/tests/test_model.o $(BUILD)/obj/emu/kernels/cuda.o \
		$(EMU_DEVICE) $(LIBZRT) $(LIBZIPCCL)
	@mkdir -p $(dir $@)
	$(CXX) -fopenmp -pthread $^ $(LDLIBS) -o $@
$(BUILD)/gpu/test_coll_device_emu: $(BUILD)/obj/emu/tests/test_coll_device.o $(EMU_ZIPCCL) $(LIBZIPCCL)
	@mkdir -p $(dir $@)
	$(CXX) -fopenmp -pthread $^ $(LDLIBS) -o $@
# the trainer with both: runtime.device: cuda on the emulated GPU
$(BUILD)/gpu/train_emu: $(BUILD)/obj/runtime/train.o $(BUILD)/obj/emu/kernels/cuda.o $(EMU_ZIPCCL) \
		$(LIBZRT) $(LIBZIPCCL)
	@mkdir -p $(dir $@)
	$(CXX) -fopenmp -pthread $^ $(LDLIBS) -o $@
$(BUILD)/gpu/%: tests/gpu/%.cu $(wildcard tests/gpu/*.h) $(LIBZIPCCL)
	@mkdir -p $(dir $@) $(BUILD)/obj/tests/gpu
	$(NVCC) $(filter-out $(MPI_CFLAGS),$(CPPFLAGS)) $(NVCCFLAGS) -c $< -o $(BUILD)/obj/tests/gpu/$*.cu.o
	$(CC) $(CFLAGS) $(BUILD)/obj/tests/gpu/$*.cu.o $(LIBZIPCCL) $(LDLIBS) -o $@

# The sanitizer build: same sources, own directory, no CUDA objects.
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
asan-all:
	@$(MAKE) --no-print-directory BUILD=build-asan NO_CUDA=1 SAN="$(ASAN_FLAGS)" CFLAGS="-O1 -g" all

test: deps
	@$(BUILDMAKE) all asan-all
	@scripts/run_tests.sh $(BUILD) build-asan

test-asan: deps
	@$(BUILDMAKE) asan-all
	@scripts/run_tests.sh build-asan

# test-long: the suite's long sweeps; every fuzz target for
# FUZZ_LONG_SECONDS (the committed corpus left as it is; a finding, or no
# clang to be had, fails it); tests/mutate_codec_boundary.sh: boundary
# changes planted in each codec encoder (in temporary copies) must fail the
# boundary cases; tests/mutate_tree_order.sh: changes of the rank-invariant
# gradient tree's order must fail tests/test_train_invariant.sh. The
# suite's closing line comes last.
FUZZ_LONG_SECONDS ?= 60
test-long: deps
	@$(BUILDMAKE) all
	@rc=0; FUZZ_KEEP_CORPUS=1 scripts/fuzz.sh $(FUZZ_LONG_SECONDS) || rc=1; \
	 tests/mutate_codec_boundary.sh $(BUILD) || rc=1; \
	 tests/mutate_tree_order.sh $(BUILD) || rc=1; \
	 ZIPCCL_TEST_LONG=1 scripts/run_tests.sh $(BUILD) || rc=1; exit $$rc

run: deps
	@$(BUILDMAKE) all
	@scripts/run_default.sh

run-moe: deps
	@$(BUILDMAKE) all
	@CONFIG=configs/qwen3-moe-tiny.yaml scripts/run_default.sh

FUZZ_SECONDS ?= 60
fuzz: deps
	@scripts/fuzz.sh $(FUZZ_SECONDS)

# A variable's value, for scripts/fuzz.sh (make print-LDLIBS, print-CPPFLAGS):
# its loader targets compile and link as the library does.
print-%:
	@echo $($*)

test-gpu: all
	@scripts/test_gpu.sh

# The same checks on a GPU machine without our Debian packages: pack the
# programs and libraries built here (BUILD/gpu-bundle.tar.xz), then run
# `scripts/test_gpu.sh --bundle BUILD/gpu-bundle.tar.xz` there.
gpu-bundle: all
	@scripts/gpu_bundle.sh $(BUILD)

bench: all
	$(BUILD)/zipccl-codec-bench

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
