/*
 * checkpoint.c — checkpoints as safetensors + JSON (see checkpoint.h).
 *
 * Saving gathers each unit's fp32 params, m and v with the FSDP all-gather
 * (every rank takes part, rank 0 keeps the result), cuts the flat unit into
 * its named tensors and writes two safetensors files with h2's writer (which
 * writes to a temporary name and renames, so a crash never leaves half a
 * file). Loading needs no communication: every rank reads the files and
 * keeps its own shard. Reading returns its errors (a bad --resume is bad
 * input, refused cleanly by every rank alike); saving dies on them.
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
               dir, strerror(errno));
}

static void rm_step_dir(const char* dir) {
    static const char* files[] = {"model.safetensors", "optim.safetensors", "state.json",
                                  "config.yaml", "manifest.json"};
    char p[1200];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    /* the Hugging Face copy (checkpoint.hf): every file of step_N/hf */
    snprintf(p, sizeof p, "%s/hf", dir);
    DIR* d = opendir(p);
    if (d) {
        struct dirent* e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char q[1500];
            snprintf(q, sizeof q, "%s/%s", p, e->d_name);
            unlink(q);
        }
        closedir(d);
        rmdir(p);
    }
    rmdir(dir);
}

static int cmp_str(const void* a, const void* b) {
    return strcmp(*(char* const*)a, *(char* const*)b);
}

/* Keep the newest `keep` step_* directories under root. */
static void prune(const char* root, int keep) {
    if (keep <= 0) return;
    DIR* d = opendir(root);
    if (!d) return;
    char* names[4096];
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) && n < 4096)
        if (!strncmp(e->d_name, "step_", 5)) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str); /* zero-padded: sorts by step */
    for (int i = 0; i < n; i++) {
        if (i < n - keep) {
            char p[1100];
            snprintf(p, sizeof p, "%s/%s", root, names[i]);
            rm_step_dir(p);
        }
        free(names[i]);
    }
}

static int verify_manifest(const char* dir, char* err, size_t errlen);

/* A small text file written in full or a clear error: a full disk shows up
 * at fflush / fclose as often as at fprintf, and a file cut short there
 * would be hashed into the manifest as if whole. */
static void close_checked(FILE* fp, const char* path) {
    const int bad = ferror(fp) || fflush(fp) != 0 || fsync(fileno(fp)) != 0;
    const int e = errno;
    trainCheck(fclose(fp) == 0 && !bad, "checkpoint: writing %s failed: %s", path,
               strerror(bad ? e : errno));
}

/* Data of path (a file or a directory's entries) on the disk before what
 * depends on it is written: the manifest after the files it hashes, `latest`
 * after the manifest, so a crash never leaves `latest` naming a checkpoint
 * whose bytes were still in the page cache. */
static void sync_path(const char* path) {
    int fd = open(path, O_RDONLY);
    trainCheck(fd >= 0 && fsync(fd) == 0, "checkpoint: cannot sync %s: %s", path, strerror(errno));
    close(fd);
}

void checkpoint_save(Fsdp* f, const TrainConfig* cfg, const TrainState* st) {
    const LlamaConfig* mc = &cfg->model;
    char dir[1100], path[1200], err[512];
    snprintf(dir, sizeof dir, "%s/step_%08d", cfg->ckpt.dir, st->step);
    st_writer* wm = NULL;
    st_writer* wo = NULL;
    float** keep = NULL; /* rank 0: the gathered arrays, alive until written */
    if (f->rank == 0) {
        mkdir_p(dir);
        wm = st_writer_begin();
        wo = st_writer_begin();
        trainCheck(wm && wo, "checkpoint: out of memory");
        keep = zrt_calloc((size_t)f->n_units * 3, sizeof(float*), "checkpoint buffers");
    }
    for (int u = 0; u < f->n_units; u++) {
        int nt = llama_unit_tensors(mc, u, NULL, NULL, NULL, 0);
        trainCheck(nt > 0, "unit %d has %d tensors", u, nt);
        char(*names)[64] = zrt_malloc((size_t)nt * sizeof *names, "tensor names");
        size_t* rows = zrt_malloc((size_t)nt * 2 * sizeof(size_t), "tensor shapes");
        size_t* cols = rows + nt;
        llama_unit_tensors(mc, u, names, rows, cols, nt);
        for (int which = 0; which < 3; which++) {
            float* full = zrt_malloc(fsdp_full_floats(f, u) * sizeof(float), "checkpoint gather");
            fsdp_gather_full(f, u, which, full);
            if (f->rank != 0) {
                free(full);
                continue;
            }
            keep[u * 3 + which] = full;
            size_t off = 0;
            for (int t = 0; t < nt; t++) {
                char name[80];
                snprintf(name, sizeof name, "%s%s", which == 0 ? "" : which == 1 ? "m." : "v.",
                         names[t]);
                int64_t shape[2] = {(int64_t)rows[t], (int64_t)cols[t]};
                int ndim = cols[t] == 1 ? 1 : 2;
                size_t n = rows[t] * cols[t];
                trainCheck(!st_writer_add(which == 0 ? wm : wo, name, "F32", ndim, shape,
                                          full + off, n * sizeof(float), err, sizeof err),
                           "checkpoint: %s", err);
                off += n;
            }
            trainCheck(off == f->units[u].full_numel, "unit %d: tensors cover %zu of %zu values",
                       u, off, f->units[u].full_numel);
        }
        free(names);
        free(rows);
    }
    if (f->rank == 0) {
        char stepbuf[32];
        snprintf(stepbuf, sizeof stepbuf, "%d", st->step);
        st_writer_set_metadata(wm, "step", stepbuf, err, sizeof err);
        st_writer_set_metadata(wo, "step", stepbuf, err, sizeof err);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        trainCheck(!st_writer_write(wm, path, err, sizeof err), "checkpoint: %s", err);
        snprintf(path, sizeof path, "%s/optim.safetensors", dir);
        trainCheck(!st_writer_write(wo, path, err, sizeof err), "checkpoint: %s", err);
        st_writer_free(wm);
        st_writer_free(wo);
        if (cfg->ckpt.hf) {
            /* The same weights as a Hugging Face directory, before the
             * manifest and `latest`: a checkpoint that is complete has it. */
            const float** units = zrt_malloc((size_t)f->n_units * sizeof *units, "units");
            for (int u = 0; u < f->n_units; u++) units[u] = keep[u * 3];
            DataMeta dm;
            char derr[1200];
            const int meta = data_read_meta(cfg->data.path, &dm, derr, sizeof derr) == 0 &&
                             dm.present;
            HfExportOptions ho = {cfg->ckpt.hf_dtype, cfg->ckpt.hf_shard_bytes, cfg->init_from,
                                  meta ? dm.tokenizer : NULL, meta ? dm.bos_id : -1,
                                  meta ? dm.eos_id : -1};
            char hdir[1200], herr[2048];
            snprintf(hdir, sizeof hdir, "%s/hf", dir);
            trainCheck(!hf_export(mc, units, &ho, hdir, herr, sizeof herr), "checkpoint: %s", herr);
            free(units);
        }
        for (int i = 0; i < f->n_units * 3; i++) free(keep[i]);
        free(keep);

        snprintf(path, sizeof path, "%s/state.json", dir);
        FILE* fp = fopen(path, "w");
        trainCheck(fp, "checkpoint: cannot write %s: %s", path, strerror(errno));
        fprintf(fp,
                "{\"step\": %d, \"samples\": %lld, \"nranks\": %d, \"data_seed\": %lld, "
                "\"train_seed\": %lld, \"data_fnv1a64\": \"%016" PRIx64 "\"}\n",
                st->step, st->samples, f->nranks, cfg->data.seed, cfg->train.seed, st->data_hash);
        close_checked(fp, path);
        snprintf(path, sizeof path, "%s/config.yaml", dir);
        fp = fopen(path, "w");
        trainCheck(fp, "checkpoint: cannot write %s: %s", path, strerror(errno));
        config_print(cfg, fp);
        close_checked(fp, path);

        static const char* files[] = {"model.safetensors", "optim.safetensors", "state.json",
                                      "config.yaml"};
        snprintf(path, sizeof path, "%s/manifest.json.tmp", dir);
        fp = fopen(path, "w");
        trainCheck(fp, "checkpoint: cannot write %s: %s", path, strerror(errno));
        fprintf(fp, "{\"format\": \"zipccl-runtime-checkpoint-1\", \"step\": %d, \"files\": [",
                st->step);
        for (int i = 0; i < 4; i++) {
            char fpth[1300];
            size_t bytes;
            snprintf(fpth, sizeof fpth, "%s/%s", dir, files[i]);
            sync_path(fpth);
            uint64_t h;
            trainCheck(!zrt_file_fnv1a64(fpth, &h, &bytes), "checkpoint: cannot read %s: %s", fpth,
                       strerror(errno));
            fprintf(fp, "%s{\"name\": \"%s\", \"bytes\": %zu, \"fnv1a64\": \"%016" PRIx64 "\"}",
                    i ? ", " : "", files[i], bytes, h);
        }
        fprintf(fp, "]}\n");
        close_checked(fp, path);
        char final[1200];
        snprintf(final, sizeof final, "%s/manifest.json", dir);
        trainCheck(rename(path, final) == 0, "checkpoint: rename %s: %s", path, strerror(errno));
        sync_path(dir);
        /* read back against the manifest before anything points at it */
        char verr[1600];
        trainCheck(!verify_manifest(dir, verr, sizeof verr),
                   "checkpoint: %s was written but does not read back (%s); %s/latest still names "
                   "the previous checkpoint",
                   dir, verr, cfg->ckpt.dir);

        /* `latest` last: a reader that finds it finds a complete checkpoint. */
        snprintf(path, sizeof path, "%s/latest.tmp", cfg->ckpt.dir);
        fp = fopen(path, "w");
        trainCheck(fp, "checkpoint: cannot write %s: %s", path, strerror(errno));
        fprintf(fp, "step_%08d\n", st->step);
        close_checked(fp, path);
        snprintf(final, sizeof final, "%s/latest", cfg->ckpt.dir);
        trainCheck(rename(path, final) == 0, "checkpoint: rename %s: %s", path, strerror(errno));
        sync_path(cfg->ckpt.dir);
        prune(cfg->ckpt.dir, cfg->ckpt.keep);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Check every file against the manifest; a checkpoint that was edited,
 * truncated or half-copied is refused by name. */
static int verify_manifest(const char* dir, char* err, size_t errlen) {
    char path[1200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE* fp = fopen(path, "rb");
    if (!fp)
        return zrt_errf(err, errlen, "--resume: %s is not a checkpoint (no manifest.json: %s)", dir,
                        strerror(errno));
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = '\0';
    const char* p = text;
    int files = 0;
    while ((p = strstr(p, "{\"name\": \""))) {
        char name[128], hex[32];
        size_t bytes;
        if (sscanf(p, "{\"name\": \"%127[^\"]\", \"bytes\": %zu, \"fnv1a64\": \"%31[0-9a-f]\"}",
                   name, &bytes, hex) != 3)
            return zrt_errf(err, errlen, "--resume: %s/manifest.json is malformed near '%.40s'",
                            dir, p);
        char fpth[1400];
        snprintf(fpth, sizeof fpth, "%s/%s", dir, name);
        size_t got;
        uint64_t h;
        if (zrt_file_fnv1a64(fpth, &h, &got))
            return zrt_errf(err, errlen, "--resume: cannot read %s: %s", fpth, strerror(errno));
        char ghex[32];
        snprintf(ghex, sizeof ghex, "%016" PRIx64, h);
        if (got != bytes || strcmp(ghex, hex))
            return zrt_errf(err, errlen,
                            "--resume: %s does not match the manifest (%zu bytes, hash %s; "
                            "manifest says %zu bytes, hash %s)",
                            fpth, got, ghex, bytes, hex);
        files++;
        p++;
    }
    if (files < 4)
        return zrt_errf(err, errlen, "--resume: %s/manifest.json lists %d files, expected 4", dir,
                        files);
    return 0;
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
                                  path, name);
                else if (strcmp(T->dtype, "F32") || T->numel != n)
                    rc = zrt_errf(err, errlen,
                                  "--resume: %s: tensor '%s' is %s with %llu values, the model "
                                  "needs F32 with %zu (different model?)",
                                  path, name, T->dtype, (unsigned long long)T->numel, n);
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
        if (!ok) return zrt_errf(err, errlen, "--resume: %s is empty", latest);
        snprintf(ck->dir, sizeof ck->dir, "%s/%s", path, name);
    } else {
        snprintf(ck->dir, sizeof ck->dir, "%s", path);
    }
    if (verify_manifest(ck->dir, err, errlen)) return -1;
    char p[1200], text[1024];
    snprintf(p, sizeof p, "%s/state.json", ck->dir);
    fp = fopen(p, "r");
    if (!fp) return zrt_errf(err, errlen, "--resume: cannot read %s: %s", p, strerror(errno));
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = '\0';
    TrainState* st = &ck->st;
    if (sscanf(text, "{\"step\": %d, \"samples\": %lld, \"nranks\": %d", &st->step, &st->samples,
               &ck->nranks) != 3 ||
        st->step < 0 || st->samples < 0 || ck->nranks < 1)
        return zrt_errf(err, errlen, "--resume: %s is malformed", p);
    /* Checkpoints from before the data hash was recorded resume unchecked. */
    const char* h = strstr(text, "\"data_fnv1a64\": \"");
    if (h) st->data_hash = strtoull(h + 17, NULL, 16);
    snprintf(p, sizeof p, "%s/config.yaml", ck->dir);
    config_defaults(&ck->cfg);
    char e[1024];
    if (config_load(&ck->cfg, p, e, sizeof e))
        return zrt_errf(err, errlen, "--resume: cannot read the checkpoint's config: %s", e);
    return 0;
}

int checkpoint_load(Fsdp* f, const CheckpointInfo* ck, char* err, size_t errlen) {
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", ck->dir);
    if (load_file(f, p, 0, err, errlen)) return -1;
    snprintf(p, sizeof p, "%s/optim.safetensors", ck->dir);
    return load_file(f, p, 1, err, errlen);
}

int checkpoint_read_params(const CheckpointInfo* ck, float*** units_out, char* err,
                           size_t errlen) {
    const LlamaConfig* mc = &ck->cfg.model;
    char path[1200], e[512];
    snprintf(path, sizeof path, "%s/model.safetensors", ck->dir);
    st_file* sf;
    if (st_open(path, &sf, e, sizeof e)) return zrt_errf(err, errlen, "%s", e);
    const int n_units = llama_num_units(mc);
    float** units = zrt_calloc((size_t)n_units, sizeof *units, "units");
    int rc = 0;
    for (int u = 0; !rc && u < n_units; u++) {
        const int nt = llama_unit_tensors(mc, u, NULL, NULL, NULL, 0);
        char(*names)[64] = zrt_malloc((size_t)nt * sizeof *names, "tensor names");
        size_t* rows = zrt_malloc((size_t)nt * 2 * sizeof(size_t), "tensor shapes");
        llama_unit_tensors(mc, u, names, rows, rows + nt, nt);
        units[u] = zrt_malloc(llama_unit_numel(mc, u) * sizeof(float) + 1, "unit");
        size_t off = 0;
        for (int t = 0; !rc && t < nt; t++) {
            const size_t n = rows[t] * rows[nt + t];
            const st_tensor* T = st_find(sf, names[t]);
            if (!T || strcmp(T->dtype, "F32") || T->numel != n)
                rc = zrt_errf(err, errlen, "%s: tensor '%s' missing or not F32 with %zu values",
                              path, names[t], n);
            else if (st_read(sf, T, units[u] + off, n * sizeof(float), e, sizeof e))
                rc = zrt_errf(err, errlen, "%s", e);
            off += n;
        }
        free(names);
        free(rows);
    }
    st_close(sf);
    if (rc) {
        for (int u = 0; u < n_units; u++) free(units[u]);
        free(units);
        return -1;
    }
    *units_out = units;
    return 0;
}
