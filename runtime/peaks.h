/*
 * peaks.h — what a card can do on paper: the dense peak FLOP/s of NVIDIA
 * data-center GPUs by device name, MFU's denominator on a CUDA device
 * (docs/RUNTIME.md "Logs").
 *
 * MFU is model FLOPs over the spec peak of the card for the compute dtype:
 * model.compute bf16 against the bf16 tensor-core peak (fp32 accumulation),
 * fp32 against the fp32 peak without tensor cores (fp32 mode keeps TF32 off).
 * Dense figures only: the datasheets' "with sparsity" numbers are twice them.
 * The figures and their sources are in peaks.c.
 *
 * Left out: cards not in the table (the trainer falls back to its measured
 * matmul probe and says so), clocks below the boost clock (power or thermal
 * limits), MIG slices, and the CPU (a shared machine has no spec peak; the
 * trainer measures SGEMM at start-up).
 */
#ifndef RUNTIME_PEAKS_H
#define RUNTIME_PEAKS_H

typedef struct {
    const char* match;  /* words of the CUDA device name (cudaDeviceProp.name) */
    const char* name;   /* the card as its datasheet names it */
    double bf16;        /* dense BF16 tensor-core FLOP/s, fp32 accumulation */
    double tf32;        /* dense TF32 tensor-core FLOP/s (for reference: never MFU's) */
    double fp32;        /* FP32 FLOP/s without tensor cores */
    const char* source; /* where the figures come from */
} ZrtCardPeak;

/* The table's row for a device name or label ("NVIDIA H200 (device 0 of
 * 8)"): the first row whose match occurs in it as whole words (case
 * ignored), so "GH200" is not an "H200" and "RTX A1000" not an "A100".
 * NULL: a card the table does not know. */
const ZrtCardPeak* zrt_card_peak(const char* device_name);

/* The card's dense peak FLOP/s for a compute dtype ("bf16" | "fp32", as
 * model.compute); 0 for any other. */
double zrt_card_peak_flops(const ZrtCardPeak* card, const char* compute);

#endif
