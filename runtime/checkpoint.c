/*
 * checkpoint.c — checkpoints as safetensors + JSON (see checkpoint.h).
 *
 * Saving: every rank writes its own slices of every unit's params, m and v
 * (format 2, one file per rank, in place: the writer copies nothing) and
 * reads its file back for its hash; rank 0 gathers the hashes and writes
 * the manifest. With checkpoint.hf the Hugging Face copy is streamed: the
 * ranks gather each unit the export asks for, rank 0 writes it. Loading
 * needs no communication: every rank reads the pieces of the rank files
 * that overlap its own slices. Reading returns its errors (a bad --resume
 * is bad input, refused cleanly by every rank alike); saving dies on them.
 * Paths and what a checkpoint's files say (manifest entries, `latest`,
 * ranges) are quoted in messages through zrt_printable (log.h).
 */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "hf.h"
#include "log.h"
#include "safetensors.h"

/* Format 2: each rank writes its own slices, DIR/step_N/rank_R.safetensors */
#define RANK_FILE "rank_%05d.safetensors"


static void mkdir_p(const char* dir) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char* p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    trainCheck(mkdir(tmp, 0755) == 0 || errno == EEXIST, "checkpoint: cannot create %s: %s",
               PRINTABLE(dir), strerror(errno));
}

static void rm_step_dir(const char* dir) {
    /* every file of the step (the rank files, state, config, manifest) and
     * the Hugging Face copy of checkpoint.hf, step_N/hf */
    DIR* d = opendir(dir);
    if (d) {
        struct dirent* e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char q[1400];
            snprintf(q, sizeof q, "%s/%s", dir, e->d_name);
            if (strcmp(e->d_name, "hf")) {
                unlink(q);
                continue;
            }
            DIR* h = opendir(q);
            struct dirent* g;
            while (h && (g = readdir(h))) {
                if (g->d_name[0] == '.') continue;
                char r[1700];
                snprintf(r, sizeof r, "%s/%s", q, g->d_name);
                unlink(r);
            }
            if (h) closedir(h);
            rmdir(q);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int cmp_str(const void* a, const void* b) {
    return strcmp(*(char* const*)a, *(char* const*)b);
}

int checkpoint_list_steps(const char* root, char** names, int max) {
    DIR* d = opendir(root);
    if (!d) return 0;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) && n < max)
        if (!strncmp(e->d_name, "step_", 5)) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str); /* zero-padded: sorts by step */
    return n;
}

/* Keep the newest `keep` step_* directories under root. */
static void prune(const char* root, int keep) {
    if (keep <= 0) return;
    char* names[CHECKPOINT_MAX_STEPS];
    const int n = checkpoint_list_steps(root, names, CHECKPOINT_MAX_STEPS);
    for (int i = 0; i < n; i++) {
        if (i < n - keep) {
            char p[1100];
            snprintf(p, sizeof p, "%s/%s", root, names[i]);
            rm_step_dir(p);
        }
        free(names[i]);
    }
}

static int verify_manifest(const char* dir, int quick, char* err, size_t errlen);

/* A small text file written in full or a clear error: a full disk shows up
 * at fflush / fclose as often as at fprintf, and a file cut short there
 * would be hashed into the manifest as if whole. */
static void close_checked(FILE* fp, const char* path) {
    const int bad = ferror(fp) || fflush(fp) != 0 || fsync(fileno(fp)) != 0;
    const int e = errno;
    trainCheck(fclose(fp) == 0 && !bad, "checkpoint: writing %s failed: %s", PRINTABLE(path),
               strerror(bad ? e : errno));
}

/* Data of path (a file or a directory's entries) on the disk before what
 * depends on it is written: the manifest after the files it hashes, `latest`
 * after the manifest, so a crash never leaves `latest` naming a checkpoint
 * whose bytes were still in the page cache. */
static void sync_path(const char* path) {
    int fd = open(path, O_RDONLY);
    trainCheck(fd >= 0 && fsync(fd) == 0, "checkpoint: cannot sync %s: %s", PRINTABLE(path),
               strerror(errno));
    close(fd);
}

/* Rank 0's side of the streamed Hugging Face export: each unit the export
 * asks for is gathered (all ranks gather the same units in the same order),
 * the previous one freed. */
typedef struct {
    Fsdp* f;
    const int* order;
    int n, next, cur;
    float* buf;
} ExportFeed;

static const float* feed_unit(void* ctx, int unit) {
    ExportFeed* x = ctx;
    if (unit == x->cur) return x->buf;
    trainCheck(x->next < x->n && x->order[x->next] == unit,
               "checkpoint: the export asked for unit %d out of its order", unit);
    free(x->buf);
    x->buf = zrt_malloc(fsdp_full_floats(x->f, unit) * sizeof(float), "export unit");
    fsdp_gather_full(x->f, unit, 0, x->buf);
    x->cur = unit;
    x->next++;
    return x->buf;
}

void checkpoint_save(Fsdp* f, const TrainConfig* cfg, const TrainState* st) {
    const LlamaConfig* mc = &cfg->model;
    char dir[1100], path[1200], err[512];
    snprintf(dir, sizeof dir, "%s/step_%08d", cfg->ckpt.dir, st->step);
    if (f->rank == 0) mkdir_p(dir);
    MPI_Barrier(MPI_COMM_WORLD); /* the directory exists before any rank writes into it */

    /* This rank's slices, in place (the writer copies nothing): params, m
     * and v of every unit where it holds real elements, each range named in
     * the file's metadata ("<unit>": "lo hi" of the whole unit). */
    st_writer* w = st_writer_begin();
    trainCheck(w, "checkpoint: out of memory");
    for (int u = 0; u < f->n_units; u++) {
        size_t lo, hi;
        fsdp_shard_range(f, u, &lo, &hi);
        if (hi <= lo) continue;
        const char* un = f->units[u].name;
        for (int which = 0; which < 3; which++) {
            char name[96];
            snprintf(name, sizeof name, "%s%s", which == 0 ? "" : which == 1 ? "m." : "v.", un);
            const int64_t shape[1] = {(int64_t)(hi - lo)};
            trainCheck(!st_writer_add(w, name, "F32", 1, shape, fsdp_shard_host(f, u, which, 1),
                                      (hi - lo) * sizeof(float), err, sizeof err),
                       "checkpoint: %s", err);
        }
        char range[64];
        snprintf(range, sizeof range, "%zu %zu", lo, hi);
        trainCheck(!st_writer_set_metadata(w, un, range, err, sizeof err), "checkpoint: %s", err);
    }
    char num[32];
    snprintf(num, sizeof num, "%d", st->step);
    st_writer_set_metadata(w, "step", num, err, sizeof err);
    snprintf(num, sizeof num, "%d", f->rank);
    st_writer_set_metadata(w, "rank", num, err, sizeof err);
    snprintf(path, sizeof path, "%s/" RANK_FILE, dir, f->rank);
    trainCheck(!st_writer_write(w, path, err, sizeof err), "checkpoint: %s", err);
    st_writer_free(w);
    fsdp_host_release(f); /* a device's host copies of the shards */
    /* on the disk, then read back: the manifest's hash is of what the disk holds */
    sync_path(path);
    uint64_t mine[2] = {0, 0};
    size_t bytes = 0;
    trainCheck(!zrt_file_fnv1a64(path, &mine[1], &bytes), "checkpoint: cannot read %s back: %s",
               PRINTABLE(path), strerror(errno));
    mine[0] = bytes;
    uint64_t* all = f->rank == 0 ? zrt_malloc(2 * (size_t)f->nranks * sizeof(uint64_t), "hashes")
                                 : NULL;
    MPI_Gather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);

    /* checkpoint.hf: the weights as a Hugging Face directory too, before the
     * manifest and `latest` (a complete checkpoint has it), streamed: every
     * rank takes part in the gather of each unit the export asks for, in
     * its order, and rank 0 converts and writes it, holding one unit */
    if (cfg->ckpt.hf) {
        const int n = hf_export_unit_order(mc, NULL, 0);
        int* order = zrt_malloc((size_t)n * sizeof(int), "export order");
        hf_export_unit_order(mc, order, n);
        if (f->rank == 0) {
            DataMeta dm;
            char derr[1200];
            const int meta = data_read_meta(cfg->data.path, &dm, derr, sizeof derr) == 0 &&
                             dm.present;
            HfExportOptions ho = {cfg->ckpt.hf_dtype, cfg->ckpt.hf_shard_bytes, cfg->init_from,
                                  meta ? dm.tokenizer : NULL, meta ? dm.bos_id : -1,
                                  meta ? dm.eos_id : -1};
            char hdir[1200], herr[2048];
            snprintf(hdir, sizeof hdir, "%s/hf", dir);
            ExportFeed feed = {f, order, n, 0, -1, NULL};
            trainCheck(!hf_export_stream(mc, feed_unit, &feed, &ho, hdir, herr, sizeof herr),
                       "checkpoint: %s", herr);
            trainCheck(feed.next == n, "checkpoint: the export asked for %d of its %d units",
                       feed.next, n);
            free(feed.buf);
        } else {
            for (int i = 0; i < n; i++) {
                float* full = zrt_malloc(fsdp_full_floats(f, order[i]) * sizeof(float), "gather");
                fsdp_gather_full(f, order[i], 0, full);
                free(full);
            }
        }
        free(order);
    }
    if (f->rank == 0) {
        snprintf(path, sizeof path, "%s/state.json", dir);
        FILE* fp = fopen(path, "w");
        trainCheck(fp, "checkpoint: cannot write %s: %s", PRINTABLE(path), strerror(errno));
        fprintf(fp,
                "{\"step\": %d, \"samples\": %lld, \"nranks\": %d, \"data_seed\": %lld, "
                "\"train_seed\": %lld, \"data_fnv1a64\": \"%016" PRIx64 "\"}\n",
                st->step, st->samples, f->nranks, cfg->data.seed, cfg->train.seed, st->data_hash);
        close_checked(fp, path);
        snprintf(path, sizeof path, "%s/config.yaml", dir);
        fp = fopen(path, "w");
        trainCheck(fp, "checkpoint: cannot write %s: %s", PRINTABLE(path), strerror(errno));
        config_print(cfg, fp);
        close_checked(fp, path);

        snprintf(path, sizeof path, "%s/manifest.json.tmp", dir);
        fp = fopen(path, "w");
        trainCheck(fp, "checkpoint: cannot write %s: %s", PRINTABLE(path), strerror(errno));
        fprintf(fp, "{\"format\": \"zipccl-runtime-checkpoint-2\", \"step\": %d, \"nranks\": %d, "
                    "\"files\": [",
                st->step, f->nranks);
        for (int r = 0; r < f->nranks; r++) {
            char name[64];
            snprintf(name, sizeof name, RANK_FILE, r);
            fprintf(fp, "%s{\"name\": \"%s\", \"bytes\": %" PRIu64 ", \"fnv1a64\": \"%016" PRIx64
                        "\"}",
                    r ? ",\n  " : "\n  ", name, all[2 * r], all[2 * r + 1]);
        }
        static const char* small[] = {"state.json", "config.yaml"};
        for (int i = 0; i < 2; i++) {
            char fpth[1300];
            size_t n;
            uint64_t h;
            snprintf(fpth, sizeof fpth, "%s/%s", dir, small[i]);
            sync_path(fpth);
            trainCheck(!zrt_file_fnv1a64(fpth, &h, &n), "checkpoint: cannot read %s: %s",
                       PRINTABLE(fpth), strerror(errno));
            fprintf(fp, ",\n  {\"name\": \"%s\", \"bytes\": %zu, \"fnv1a64\": \"%016" PRIx64 "\"}",
                    small[i], n, h);
        }
        fprintf(fp, "]}\n");
        close_checked(fp, path);
        free(all);
        char final[1200];
        snprintf(final, sizeof final, "%s/manifest.json", dir);
        trainCheck(rename(path, final) == 0, "checkpoint: rename %s: %s", PRINTABLE(path),
                   strerror(errno));
        sync_path(dir);
        /* read back against the manifest before anything points at it (each
         * rank file was read back by its rank: here its size, the rest in full) */
        char verr[1600];
        trainCheck(!verify_manifest(dir, 1, verr, sizeof verr),
                   "checkpoint: %s was written but does not read back (%s); %s/latest still names "
                   "the previous checkpoint",
                   PRINTABLE(dir), verr, PRINTABLE(cfg->ckpt.dir));

        /* `latest` last: a reader that finds it finds a complete checkpoint. */
        snprintf(path, sizeof path, "%s/latest.tmp", cfg->ckpt.dir);
        fp = fopen(path, "w");
        trainCheck(fp, "checkpoint: cannot write %s: %s", PRINTABLE(path), strerror(errno));
        fprintf(fp, "step_%08d\n", st->step);
        close_checked(fp, path);
        snprintf(final, sizeof final, "%s/latest", cfg->ckpt.dir);
        trainCheck(rename(path, final) == 0, "checkpoint: rename %s: %s", PRINTABLE(path),
                   strerror(errno));
        sync_path(cfg->ckpt.dir);
        prune(cfg->ckpt.dir, cfg->ckpt.keep);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Check every file against the manifest; a checkpoint that was edited,
 * truncated or half-copied is refused by name. quick: a rank file's size
 * only (its rank read it back against its hash when it wrote it). */
static int verify_manifest(const char* dir, int quick, char* err, size_t errlen) {
    char path[1200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE* fp = fopen(path, "rb");
    if (!fp)
        return zrt_errf(err, errlen, "--resume: %s is not a checkpoint (no manifest.json: %s)",
                        PRINTABLE(dir), strerror(errno));
    fseek(fp, 0, SEEK_END);
    const long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    if (size < 0 || size > (64l << 20)) {
        fclose(fp);
        return zrt_errf(err, errlen, "--resume: %s is not a manifest (%ld bytes)", PRINTABLE(path),
                        size);
    }
    char* text = zrt_malloc((size_t)size + 1, "manifest");
    const size_t n = fread(text, 1, (size_t)size, fp);
    fclose(fp);
    text[n] = '\0';
    const char* p = text;
    int files = 0, rc = 0;
    while (!rc && (p = strstr(p, "{\"name\": \""))) {
        char name[128], hex[32];
        size_t bytes;
        if (sscanf(p, "{\"name\": \"%127[^\"]\", \"bytes\": %zu, \"fnv1a64\": \"%31[0-9a-f]\"}",
                   name, &bytes, hex) != 3) {
            char near[168];
            rc = zrt_errf(err, errlen, "--resume: %s/manifest.json is malformed near '%s'",
                          PRINTABLE(dir), zrt_printable_n(p, strnlen(p, 40), near, sizeof near));
            break;
        }
        char fpth[1400];
        snprintf(fpth, sizeof fpth, "%s/%s", dir, name);
        files++;
        p++;
        struct stat sb;
        if (quick && !strncmp(name, "rank_", 5)) {
            if (stat(fpth, &sb) || (size_t)sb.st_size != bytes)
                rc = zrt_errf(err, errlen, "--resume: %s is missing or not the manifest's %zu bytes",
                              PRINTABLE(fpth), bytes);
            continue;
        }
        size_t got;
        uint64_t h;
        if (zrt_file_fnv1a64(fpth, &h, &got)) {
            rc = zrt_errf(err, errlen, "--resume: cannot read %s: %s", PRINTABLE(fpth),
                          strerror(errno));
            break;
        }
        char ghex[32];
        snprintf(ghex, sizeof ghex, "%016" PRIx64, h);
        if (got != bytes || strcmp(ghex, hex))
            rc = zrt_errf(err, errlen,
                          "--resume: %s does not match the manifest (%zu bytes, hash %s; "
                          "manifest says %zu bytes, hash %s)",
                          PRINTABLE(fpth), got, ghex, bytes, hex);
    }
    free(text);
    if (!rc && files < 3)
        rc = zrt_errf(err, errlen, "--resume: %s/manifest.json lists %d files, expected 3 or more",
                      PRINTABLE(dir), files);
    return rc;
}

static int load_file(Fsdp* f, const char* path, int first_which, char* err, size_t errlen) {
    const LlamaConfig* mc = &f->cfg->model;
    char e[512];
    st_file* sf;
    if (st_open(path, &sf, e, sizeof e)) return zrt_errf(err, errlen, "--resume: %s", e);
    int rc = 0;
    for (int which = first_which; !rc && which < (first_which ? 3 : 1); which++) {
        for (int u = 0; !rc && u < f->n_units; u++) {
            int nt = llama_unit_tensors(mc, u, NULL, NULL, NULL, 0);
            char(*names)[64] = zrt_malloc((size_t)nt * sizeof *names + 1, "tensor names");
            size_t* rows = zrt_malloc((size_t)nt * 2 * sizeof(size_t) + 1, "tensor shapes");
            size_t* cols = rows + nt;
            llama_unit_tensors(mc, u, names, rows, cols, nt);
            float* full = zrt_calloc(fsdp_full_floats(f, u), sizeof(float), "checkpoint load");
            size_t off = 0;
            for (int t = 0; !rc && t < nt; t++) {
                char name[80];
                snprintf(name, sizeof name, "%s%s", which == 0 ? "" : which == 1 ? "m." : "v.",
                         names[t]);
                const st_tensor* T = st_find(sf, name);
                size_t n = rows[t] * cols[t];
                if (!T)
                    rc = zrt_errf(err, errlen, "--resume: %s has no tensor '%s' (different model?)",
                                  PRINTABLE(path), name);
                else if (strcmp(T->dtype, "F32") || T->numel != n)
                    rc = zrt_errf(err, errlen,
                                  "--resume: %s: tensor '%s' is %s with %llu values, the model "
                                  "needs F32 with %zu (different model?)",
                                  PRINTABLE(path), name, T->dtype, (unsigned long long)T->numel, n);
                else if (st_read(sf, T, full + off, n * sizeof(float), e, sizeof e))
                    rc = zrt_errf(err, errlen, "--resume: %s", e);
                off += n;
            }
            if (!rc) fsdp_load_full(f, u, which, full);
            free(full);
            free(names);
            free(rows);
        }
    }
    st_close(sf);
    return rc;
}

int checkpoint_open(const char* path, CheckpointInfo* ck, char* err, size_t errlen) {
    memset(ck, 0, sizeof *ck);
    char latest[1100];
    snprintf(latest, sizeof latest, "%s/latest", path);
    FILE* fp = fopen(latest, "r");
    if (fp) {
        char name[128] = "";
        int ok = fscanf(fp, "%127s", name) == 1;
        fclose(fp);
        if (!ok) return zrt_errf(err, errlen, "--resume: %s is empty", PRINTABLE(latest));
        snprintf(ck->dir, sizeof ck->dir, "%s/%s", path, name);
    } else {
        snprintf(ck->dir, sizeof ck->dir, "%s", path);
    }
    if (verify_manifest(ck->dir, 0, err, errlen)) return -1;
    char p[1200], text[1024];
    snprintf(p, sizeof p, "%s/state.json", ck->dir);
    fp = fopen(p, "r");
    if (!fp)
        return zrt_errf(err, errlen, "--resume: cannot read %s: %s", PRINTABLE(p), strerror(errno));
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = '\0';
    TrainState* st = &ck->st;
    if (sscanf(text, "{\"step\": %d, \"samples\": %lld, \"nranks\": %d", &st->step, &st->samples,
               &ck->nranks) != 3 ||
        st->step < 0 || st->samples < 0 || ck->nranks < 1 || ck->nranks > CHECKPOINT_MAX_RANKS)
        return zrt_errf(err, errlen, "--resume: %s is malformed (wants {\"step\": >= 0, "
                        "\"samples\": >= 0, \"nranks\": 1..%d, ...})", PRINTABLE(p),
                        CHECKPOINT_MAX_RANKS);
    /* Checkpoints from before the data hash was recorded resume unchecked. */
    const char* h = strstr(text, "\"data_fnv1a64\": \"");
    if (h) st->data_hash = strtoull(h + 17, NULL, 16);
    snprintf(p, sizeof p, "%s/config.yaml", ck->dir);
    config_defaults(&ck->cfg);
    char e[1024];
    if (config_load(&ck->cfg, p, e, sizeof e))
        return zrt_errf(err, errlen, "--resume: cannot read the checkpoint's config: %s", e);
    /* A MoE checkpoint from before moe.aux_loss_scope, written by several
     * ranks, trained with each rank's own aux loss: its absence reads as
     * "rank", so resuming with today's default (global) is a change the
     * resume check names (at one rank the two are the same bits). */
    if (!config_given(&ck->cfg, "moe.aux_loss_scope") && ck->cfg.model.n_experts > 0 && ck->nranks > 1)
        snprintf(ck->cfg.moe.aux_loss_scope, sizeof ck->cfg.moe.aux_loss_scope, "rank");
    return 0;
}

/* ---- sharded checkpoints (format 2): one file per rank ---------------------- */

static int is_sharded(const char* dir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/" RANK_FILE, dir, 0);
    return access(p, F_OK) == 0;
}

static void close_rank_files(st_file** sf, int n) {
    for (int r = 0; sf && r < n; r++) st_close(sf[r]);
    free(sf);
}

static st_file** open_rank_files(const CheckpointInfo* ck, char* err, size_t errlen) {
    st_file** sf = zrt_calloc((size_t)ck->nranks, sizeof *sf, "rank files");
    for (int r = 0; r < ck->nranks; r++) {
        char p[1200], e[512];
        snprintf(p, sizeof p, "%s/" RANK_FILE, ck->dir, r);
        if (st_open(p, &sf[r], e, sizeof e)) {
            zrt_errf(err, errlen, "--resume: %s", e);
            close_rank_files(sf, r);
            return NULL;
        }
    }
    return sf;
}

/* Values [lo, hi) of unit `un`'s array `which` (0 param, 1 m, 2 v) into dst,
 * from whichever rank files hold them (their metadata names each file's
 * range of each unit); the pieces must cover the range exactly once. */
static int read_range(st_file** sf, const CheckpointInfo* ck, const char* un, int which,
                      size_t lo, size_t hi, float* dst, char* err, size_t errlen) {
    char tname[96], e[512];
    snprintf(tname, sizeof tname, "%s%s", which == 0 ? "" : which == 1 ? "m." : "v.", un);
    size_t covered = 0;
    for (int r = 0; r < ck->nranks; r++) {
        const char* range = st_get_metadata(sf[r], un);
        if (!range) continue;
        size_t a, b;
        char shown[168];
        if (sscanf(range, "%zu %zu", &a, &b) != 2 || b < a)
            return zrt_errf(err, errlen, "--resume: %s/" RANK_FILE ": the range of %s is '%s'",
                            PRINTABLE(ck->dir), r, un,
                            zrt_printable_n(range, strnlen(range, 40), shown, sizeof shown));
        const size_t s0 = a > lo ? a : lo, e0 = b < hi ? b : hi;
        if (s0 >= e0) continue;
        const st_tensor* T = st_find(sf[r], tname);
        if (!T || strcmp(T->dtype, "F32") || T->numel != b - a)
            return zrt_errf(err, errlen,
                            "--resume: %s/" RANK_FILE ": tensor '%s' is missing or not F32 with "
                            "%zu values (its range %zu..%zu)",
                            PRINTABLE(ck->dir), r, tname, b - a, a, b);
        if (st_read_range(sf[r], T, (s0 - a) * sizeof(float), (e0 - s0) * sizeof(float),
                          dst + (s0 - lo), e, sizeof e))
            return zrt_errf(err, errlen, "--resume: %s", e);
        covered += e0 - s0;
    }
    if (covered != hi - lo)
        return zrt_errf(err, errlen,
                        "--resume: %s: the rank files hold %zu of the %zu values of %s%s in "
                        "%zu..%zu (different model?)",
                        PRINTABLE(ck->dir), covered, hi - lo,
                        which == 0 ? "" : which == 1 ? "m." : "v.", un,
                        lo, hi);
    return 0;
}

int checkpoint_load(Fsdp* f, const CheckpointInfo* ck, char* err, size_t errlen) {
    char p[1200];
    if (is_sharded(ck->dir)) { /* this rank's ranges, whatever the rank count that wrote them */
        st_file** sf = open_rank_files(ck, err, errlen);
        if (!sf) return -1;
        int rc = 0;
        for (int u = 0; !rc && u < f->n_units; u++) {
            size_t lo, hi;
            fsdp_shard_range(f, u, &lo, &hi);
            for (int which = 0; !rc && which < 3 && hi > lo; which++)
            {
                rc = read_range(sf, ck, f->units[u].name, which, lo, hi,
                                fsdp_shard_host(f, u, which, 1), err, errlen);
                if (!rc) fsdp_shard_commit(f, u, which);
            }
        }
        close_rank_files(sf, ck->nranks);
        fsdp_host_release(f);
        return rc;
    }
    /* format 1: whole tensors in model.safetensors and optim.safetensors */
    snprintf(p, sizeof p, "%s/model.safetensors", ck->dir);
    if (load_file(f, p, 0, err, errlen)) return -1;
    snprintf(p, sizeof p, "%s/optim.safetensors", ck->dir);
    return load_file(f, p, 1, err, errlen);
}

struct CheckpointReader {
    const CheckpointInfo* ck;
    st_file** rank; /* format 2: the rank files */
    st_file* model; /* format 1: model.safetensors */
    char path[1200];
};

int checkpoint_reader_open(const CheckpointInfo* ck, CheckpointReader** out, char* err,
                           size_t errlen) {
    CheckpointReader* r = zrt_calloc(1, sizeof *r, "checkpoint reader");
    r->ck = ck;
    char e[512];
    if (is_sharded(ck->dir)) {
        r->rank = open_rank_files(ck, err, errlen);
    } else {
        snprintf(r->path, sizeof r->path, "%s/model.safetensors", ck->dir);
        if (st_open(r->path, &r->model, e, sizeof e)) zrt_errf(err, errlen, "%s", e);
    }
    if (!r->rank && !r->model) {
        free(r);
        return -1;
    }
    *out = r;
    return 0;
}

int checkpoint_read_unit(CheckpointReader* r, int u, float* out, char* err, size_t errlen) {
    const LlamaConfig* mc = &r->ck->cfg.model;
    if (r->rank) {
        char un[64];
        fsdp_unit_name(mc, u, un, sizeof un);
        return read_range(r->rank, r->ck, un, 0, 0, llama_unit_numel(mc, u), out, err, errlen);
    }
    const int nt = llama_unit_tensors(mc, u, NULL, NULL, NULL, 0);
    char(*names)[64] = zrt_malloc((size_t)nt * sizeof *names + 1, "tensor names");
    size_t* rows = zrt_malloc((size_t)nt * 2 * sizeof(size_t) + 1, "tensor shapes");
    llama_unit_tensors(mc, u, names, rows, rows + nt, nt);
    size_t off = 0;
    int rc = 0;
    char e[512];
    for (int t = 0; !rc && t < nt; t++) {
        const size_t n = rows[t] * rows[nt + t];
        const st_tensor* T = st_find(r->model, names[t]);
        if (!T || strcmp(T->dtype, "F32") || T->numel != n)
            rc = zrt_errf(err, errlen, "%s: tensor '%s' missing or not F32 with %zu values",
                          PRINTABLE(r->path), names[t], n);
        else if (st_read(r->model, T, out + off, n * sizeof(float), e, sizeof e))
            rc = zrt_errf(err, errlen, "%s", e);
        off += n;
    }
    free(names);
    free(rows);
    return rc;
}

void checkpoint_reader_close(CheckpointReader* r) {
    if (!r) return;
    close_rank_files(r->rank, r->ck->nranks);
    st_close(r->model);
    free(r);
}
