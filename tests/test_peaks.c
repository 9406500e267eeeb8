/*
 * test_peaks.c — runtime/peaks.c, MFU's table of dense peaks by device
 * name: the names CUDA gives the cards (cudaDeviceProp.name, alone and
 * inside the device's label) find their rows, with the datasheets' dense
 * figures written out here as the independent reference; a compute dtype
 * picks bf16 or fp32; names that only contain a known one ("GH200",
 * "RTX A1000") and unknown cards (the warp emulator) find none, so the
 * trainer falls back to its probe (tests/test_train_cuda_emu.sh checks it
 * says so).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "peaks.h"
#include "testutil.h"

/* A check name from a device name: "peaks_" and its letters and digits. */
static const char* check_name(const char* prefix, const char* name, char* t, size_t n) {
    snprintf(t, n, "%s%s", prefix, name ? name : "NULL");
    for (char* p = t + strlen(prefix); *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            *p = '_';
    return t;
}

/* name finds the row called card with these dense TFLOP/s */
static void finds(const char* name, const char* card, double bf16, double fp32) {
    const ZrtCardPeak* c = zrt_card_peak(name);
    char t[160];
    check_name("peaks_", name, t, sizeof t);
    if (!c) {
        CHECK(0, t, "\"%s\" is not in the table", name);
        return;
    }
    const double b = zrt_card_peak_flops(c, "bf16"), f = zrt_card_peak_flops(c, "fp32");
    CHECK(!strcmp(c->name, card) && fabs(b - bf16 * 1e12) < 1e6 && fabs(f - fp32 * 1e12) < 1e6 &&
              c->source && c->source[0],
          t, "\"%s\" -> %s, bf16 %.6g, fp32 %.6g TFLOP/s; expected %s, %.6g, %.6g", name, c->name,
          b / 1e12, f / 1e12, card, bf16, fp32);
}

static void unknown(const char* name) {
    const ZrtCardPeak* c = zrt_card_peak(name);
    char t[160];
    CHECK(!c && zrt_card_peak_flops(c, "bf16") == 0, check_name("peaks_unknown_", name, t, sizeof t),
          "\"%s\" -> %s", name ? name : "NULL", c ? c->name : "none");
}

int main(void) {
    /* the driver's names of the cards (and the trainer's label, name first) */
    finds("NVIDIA H200", "NVIDIA H200 SXM", 989.5, 66.9);
    finds("NVIDIA H200 (device 3 of 8)", "NVIDIA H200 SXM", 989.5, 66.9);
    finds("NVIDIA H200 NVL", "NVIDIA H200 NVL", 835.5, 60);
    finds("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 989.5, 66.9);
    finds("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 756, 51.2);
    finds("NVIDIA H100 NVL", "NVIDIA H100 NVL", 835.5, 60);
    finds("NVIDIA A100-SXM4-80GB", "NVIDIA A100", 312, 19.5);
    finds("NVIDIA A100-SXM4-40GB", "NVIDIA A100", 312, 19.5);
    finds("NVIDIA A100-PCIE-40GB", "NVIDIA A100", 312, 19.5);
    finds("NVIDIA A100 80GB PCIe", "NVIDIA A100", 312, 19.5);
    finds("NVIDIA L40S", "NVIDIA L40S", 362.05, 91.6);
    /* the compute dtype: bf16 and fp32 only (fp32 mode keeps TF32 off) */
    const ZrtCardPeak* h = zrt_card_peak("NVIDIA H200");
    CHECK(h && zrt_card_peak_flops(h, "tf32") == 0 && zrt_card_peak_flops(h, "fp16") == 0 &&
              zrt_card_peak_flops(h, NULL) == 0 && fabs(h->tf32 - 494.7e12) < 1e6,
          "peaks_compute_dtypes", "tf32 %g, fp16 %g", h ? zrt_card_peak_flops(h, "tf32") : -1,
          h ? zrt_card_peak_flops(h, "fp16") : -1);
    CHECK(zrt_card_peak_flops(zrt_card_peak("nvidia h100 80gb hbm3"), "bf16") == 989.5e12,
          "peaks_case_ignored", "lower-case name not found");
    /* whole words only, and unknown cards */
    unknown("NVIDIA GH200 480GB");
    unknown("NVIDIA RTX A1000");
    unknown("NVIDIA L40");
    unknown("NVIDIA H1000");
    unknown("warp emulator (tests/gpu/warp_emu.h) (device 0 of 1)");
    unknown("host memory, guarded");
    unknown("");
    unknown(NULL);
    return tu_exit();
}
