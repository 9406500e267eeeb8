/*
 * peaks.c — the dense peaks of NVIDIA data-center cards (peaks.h), as NVIDIA
 * publishes them. Dense TFLOP/s, and what the source prints (* = "with
 * sparsity", twice the dense figure):
 *
 *   card (driver's name)        bf16    tf32   fp32  source
 *   H100 PCIe                   756     378    51.2  H100 whitepaper (Hopper
 *                                                    architecture, 2022): 756,
 *                                                    1,513*; 378, 756*; 51.2
 *   H100 NVL                    835.5   417.5  60    H100 datasheet: 1,671*;
 *                                                    835*; 60
 *   H100 SXM ("H100 80GB HBM3") 989.5   494.7  66.9  whitepaper: 989.4,
 *                                                    1,978.9*; 494.7; 66.9;
 *                                                    datasheet: 1,979*; 989*; 67
 *   H200 NVL                    835.5   417.5  60    H200 datasheet: 1,671*;
 *                                                    835*; 60
 *   H200 (SXM)                  989.5   494.7  66.9  H200 datasheet: 1,979*;
 *                                                    989*; 67
 *   A100 (SXM, PCIe; 40, 80 GB) 312     156    19.5  A100 datasheet: 312, 624*;
 *                                                    156, 312*; 19.5
 *   L40S                        362.05  183    91.6  L40S datasheet: 362.05,
 *                                                    733*; 183, 366*; 91.6
 *
 * The whitepaper's exact figures are taken over a datasheet's rounded ones
 * (66.9, not 67; 494.7, not 494.5), except the SXM Hoppers' bf16: 989.5,
 * the datasheets' 1,979* halved and the house's figure (docs/DESIGN.md),
 * 0.01% above the whitepaper's 989.4. The H200 is the H100's GH100 at the
 * same clocks with other memory, so its compute is the H100 SXM's; the NVL
 * boards run lower clocks and power and have rows of their own.
 *
 * Left out: the GH200 (whose name holds no whole-word "H200": the probe
 * stands in), Blackwell and later, consumer and workstation cards. A card
 * missing here is not an error: the trainer measures instead and says so.
 */
#include "peaks.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#define TF 1e12 /* the figures below are in TFLOP/s */

/* Most specific first: "H100 PCIe" before "H100". */
static const ZrtCardPeak kCards[] = {
    {"H100 PCIe", "NVIDIA H100 PCIe", 756 * TF, 378 * TF, 51.2 * TF, "NVIDIA H100 whitepaper"},
    {"H100 NVL", "NVIDIA H100 NVL", 835.5 * TF, 417.5 * TF, 60 * TF, "NVIDIA H100 datasheet"},
    /* the SXM5 board, which the driver calls "NVIDIA H100 80GB HBM3" */
    {"H100", "NVIDIA H100 SXM", 989.5 * TF, 494.7 * TF, 66.9 * TF, "NVIDIA H100 whitepaper and datasheet"},
    {"H200 NVL", "NVIDIA H200 NVL", 835.5 * TF, 417.5 * TF, 60 * TF, "NVIDIA H200 datasheet"},
    {"H200", "NVIDIA H200 SXM", 989.5 * TF, 494.7 * TF, 66.9 * TF, "NVIDIA H200 datasheet"},
    {"A100", "NVIDIA A100", 312 * TF, 156 * TF, 19.5 * TF, "NVIDIA A100 datasheet"},
    {"L40S", "NVIDIA L40S", 362.05 * TF, 183 * TF, 91.6 * TF, "NVIDIA L40S datasheet"},
};

/* w occurs in s as whole words: neither end inside a word of s. */
static int has_words(const char* s, const char* w) {
    const size_t n = strlen(w);
    for (const char* p = s; *p; p++) {
        if (p > s && isalnum((unsigned char)p[-1])) continue;
        if (!strncasecmp(p, w, n) && !isalnum((unsigned char)p[n])) return 1;
    }
    return 0;
}

const ZrtCardPeak* zrt_card_peak(const char* device_name) {
    if (!device_name) return NULL;
    for (size_t i = 0; i < sizeof kCards / sizeof kCards[0]; i++)
        if (has_words(device_name, kCards[i].match)) return &kCards[i];
    return NULL;
}

double zrt_card_peak_flops(const ZrtCardPeak* card, const char* compute) {
    if (!card || !compute) return 0;
    if (!strcmp(compute, "bf16")) return card->bf16;
    if (!strcmp(compute, "fp32")) return card->fp32;
    return 0;
}
