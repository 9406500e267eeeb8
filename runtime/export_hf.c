/*
 * export_hf.c — `build/export-hf CKPT OUTDIR`: a training checkpoint as a
 * Hugging Face model directory (runtime/hf.h), what checkpoint.hf writes
 * beside every checkpoint, for checkpoints saved without it or in another
 * dtype.
 *
 *   build/export-hf CKPT OUTDIR [--dtype fp32|bf16|fp16] [--shard-bytes N]
 *                               [--source DIR]
 *
 * CKPT is a step directory or a checkpoint root (its `latest`); its manifest
 * is verified first. The dtype and shard size default to the checkpoint's
 * checkpoint.hf_dtype and checkpoint.hf_shard_bytes, the source directory
 * (config.json fields kept, tokenizer files copied) to its model.init_from.
 * One process, no MPI. Exit status 0, or 2 with a message naming what is
 * wrong.
 *
 * Left out: optimizer state (a Hugging Face directory holds weights only).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "data.h"
#include "hf.h"
#include "log.h"

static void usage(FILE* f) {
    fprintf(f,
            "usage: build/export-hf CKPT OUTDIR [--dtype fp32|bf16|fp16] [--shard-bytes N]\n"
            "                                   [--source DIR]\n"
            "  CKPT             a checkpoint step directory, or its root (uses 'latest')\n"
            "  OUTDIR           the Hugging Face directory to write (config.json, safetensors)\n"
            "  --dtype D        tensors on disk (default: the checkpoint's checkpoint.hf_dtype)\n"
            "  --shard-bytes N  largest file, else shards + index (default: checkpoint.hf_shard_bytes)\n"
            "  --source DIR     keep its config.json fields, copy its tokenizer files\n"
            "                   (default: the checkpoint's model.init_from)\n");
}

static int fail(const char* msg) {
    /* checkpoint.c speaks to build/train's --resume */
    if (!strncmp(msg, "--resume: ", 10)) msg += 10;
    fprintf(stderr, "export-hf: error: %s\n", msg);
    return 2;
}

/* The export's unit provider: the checkpoint's units read one at a time. */
typedef struct {
    CheckpointReader* r;
    const LlamaConfig* m;
    int cur;
    float* buf;
    char err[2048];
} Feed;

static const float* feed_unit(void* ctx, int unit) {
    Feed* x = ctx;
    if (unit == x->cur) return x->buf;
    free(x->buf);
    x->buf = malloc(llama_unit_numel(x->m, unit) * sizeof(float) + 1);
    x->cur = unit;
    if (!x->buf) snprintf(x->err, sizeof x->err, "out of memory for unit %d", unit);
    else if (checkpoint_read_unit(x->r, unit, x->buf, x->err, sizeof x->err)) {
        free(x->buf);
        x->buf = NULL;
        x->cur = -1;
    }
    return x->buf;
}

int main(int argc, char** argv) {
    const char *ckpt = NULL, *out = NULL, *dtype = NULL, *source = NULL;
    long long shard = -1;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--dtype") && i + 1 < argc) {
            dtype = argv[++i];
            if (strcmp(dtype, "fp32") && strcmp(dtype, "bf16") && strcmp(dtype, "fp16"))
                return fail("--dtype: expected fp32, bf16 or fp16");
        } else if (!strcmp(a, "--shard-bytes") && i + 1 < argc) {
            char* end;
            shard = strtoll(argv[++i], &end, 10);
            if (*end || shard < 1) return fail("--shard-bytes wants a positive number of bytes");
        } else if (!strcmp(a, "--source") && i + 1 < argc) {
            source = argv[++i];
        } else if (a[0] == '-') {
            usage(stderr);
            char msg[300];
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s'", PRINTABLE(a));
            return fail(msg);
        } else if (!ckpt) {
            ckpt = a;
        } else if (!out) {
            out = a;
        } else {
            usage(stderr);
            return fail("too many arguments (CKPT OUTDIR)");
        }
    }
    if (!ckpt || !out) {
        usage(stderr);
        return fail("CKPT and OUTDIR are both needed");
    }
    static CheckpointInfo ck;
    char err[4096];
    if (checkpoint_open(ckpt, &ck, err, sizeof err)) return fail(err);
    const TrainConfig* c = &ck.cfg;
    HfExportOptions o = {c->ckpt.hf_dtype, shard > 0 ? shard : c->ckpt.hf_shard_bytes,
                         source ? source : c->init_from, NULL, -1, -1};
    if (dtype)
        o.dtype = !strcmp(dtype, "fp32")   ? zipcclFloat32
                  : !strcmp(dtype, "bf16") ? zipcclBfloat16
                                           : zipcclFloat16;
    DataMeta dm;
    if (!data_read_meta(c->data.path, &dm, err, sizeof err) && dm.present) {
        o.tokenizer = dm.tokenizer;
        o.bos_id = dm.bos_id;
        o.eos_id = dm.eos_id;
    }
    /* one unit in memory at a time: the export asks, the reader reads it */
    Feed feed = {.cur = -1};
    if (checkpoint_reader_open(&ck, &feed.r, err, sizeof err)) return fail(err);
    feed.m = &c->model;
    const int rc = hf_export_stream(&c->model, feed_unit, &feed, &o, out, err, sizeof err);
    checkpoint_reader_close(feed.r);
    free(feed.buf);
    if (rc) return fail(feed.err[0] ? feed.err : err);
    const int from = o.source_dir && o.source_dir[0];
    printf("export-hf: %s (step %d) -> %s (%s%s%s)\n", PRINTABLE(ck.dir), ck.st.step,
           PRINTABLE(out), zipcclTypeName(o.dtype), from ? ", from " : "",
           from ? PRINTABLE(o.source_dir) : "");
    return 0;
}
