/*
 * checkpoint.h — save and resume a training run, at any rank count.
 *
 * A checkpoint is a directory DIR/step_00000120/ holding
 *   rank_R.safetensors  what rank R held (format 2): for every unit where it
 *                       has real elements, its slice of the flat fp32
 *                       parameters ("<unit>"), AdamW m ("m.<unit>") and v
 *                       ("v.<unit>"), 1-D, and in the file's metadata the
 *                       slice's place in the whole unit ("<unit>": "lo hi");
 *                       units are named as FSDP names them (outer, layers.N,
 *                       layers.N.experts, head) and laid out as
 *                       llama_unit_tensors() says
 *   state.json          step, samples consumed (the data position), rank
 *                       count, seeds, a hash of the token stream
 *   config.yaml         the effective config of the run
 *   manifest.json       format, rank count, every file above with its size
 *                       and FNV-1a 64 hash
 *   hf/                 with checkpoint.hf: the weights as a Hugging Face
 *                       directory (runtime/hf.h), outside the manifest
 * and DIR/latest names the newest one. Every rank writes its own file at
 * once, in place (no gather, no copy: a checkpoint costs no memory beyond
 * the shards); the load reads, on every rank, the pieces of the old files
 * that overlap its new slices, so a checkpoint saved at N ranks loads at M
 * (and at another EP). The data position is counted in global samples, so
 * the data order continues exactly. Resuming reads the checkpoint's config
 * and state first (checkpoint_open), so the trainer can compare them with
 * its own (config_resume_check) before it builds anything, and every
 * failure is returned, not fatal: all ranks read the same files, reach the
 * same verdict and leave together. Format 1 checkpoints (whole tensors in
 * model.safetensors and optim.safetensors, written by rank 0) still load.
 *
 * checkpoint.hf streams the Hugging Face copy: the ranks gather each unit
 * the export asks for, one at a time, and rank 0 writes it (holding one
 * unit and one output file's converted tensors).
 *
 * Left out: asynchronous saving, optimizer state in reduced precision.
 */
#ifndef RUNTIME_CHECKPOINT_H
#define RUNTIME_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>

#include "fsdp.h"

typedef struct {
    int step;                    /* optimizer steps completed */
    long long samples;           /* training samples consumed (global) */
    uint64_t data_hash;          /* data_hash() of the run's data; 0: not recorded */
} TrainState;

/* What a checkpoint says about itself, read before the run is built. */
typedef struct {
    char dir[1100];              /* the step directory */
    TrainState st;
    int nranks;                  /* the rank count it was saved at */
    TrainConfig cfg;             /* its config.yaml */
} CheckpointInfo;

/* Collective: every rank writes and reads back its rank file; rank 0
 * writes state, config and the manifest, checks them, then points
 * DIR/latest at the step and prunes old ones beyond cfg->ckpt.keep. A failed write (a full disk)
 * or a read-back mismatch is fatal with the file and the cause, and leaves
 * DIR/latest naming the previous checkpoint. */
void checkpoint_save(Fsdp* f, const TrainConfig* cfg, const TrainState* st);

/* path is a step directory or a checkpoint root (then its `latest`).
 * Verifies every file against the manifest and reads state.json and
 * config.yaml into ck. Returns 0, or -1 with the reason in err. */
int checkpoint_open(const char* path, CheckpointInfo* ck, char* err, size_t errlen);
/* The most ranks a checkpoint may say it was saved at (state.json's
 * nranks): a reader opens that many rank files. */
#define CHECKPOINT_MAX_RANKS 65536

/* Loads this rank's shards of params, m and v from an opened checkpoint
 * (no communication). Returns 0, or -1 naming the file and tensor that do
 * not fit the model in err. */
int checkpoint_load(Fsdp* f, const CheckpointInfo* ck, char* err, size_t errlen);

/* The step directories under a checkpoint root: the names of its entries
 * that start with "step_", oldest first (the steps are zero-padded, so by
 * name is by step), at most max of them, each malloc'ed for the caller to
 * free. Returns how many; 0 when root cannot be opened. Used by the pruning
 * of checkpoint_save and by build/supervise to find the newest good one. */
#define CHECKPOINT_MAX_STEPS 4096
int checkpoint_list_steps(const char* root, char** names, int max);

/* The parameters of an opened checkpoint unit by unit, for tools that run
 * without ranks (build/export-hf streams them into hf_export_stream):
 * checkpoint_read_unit fills out with llama_unit_numel(&ck->cfg.model, u)
 * floats, from either format. Each returns 0, or -1 naming the file and
 * tensor in err. ck must outlive the reader. */
typedef struct CheckpointReader CheckpointReader;
int checkpoint_reader_open(const CheckpointInfo* ck, CheckpointReader** r, char* err,
                           size_t errlen);
int checkpoint_read_unit(CheckpointReader* r, int unit, float* out, char* err, size_t errlen);
void checkpoint_reader_close(CheckpointReader* r);

#endif
