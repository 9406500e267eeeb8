/*
 * checkpoint.h — save and resume a training run, at any rank count.
 *
 * A checkpoint is a directory DIR/step_00000120/ holding
 *   model.safetensors   full fp32 parameters, one tensor per model tensor,
 *                       named as llama_unit_tensors() names them
 *   optim.safetensors   AdamW state "m.<name>" and "v.<name>", full tensors
 *   state.json          step, samples consumed (the data position), rank
 *                       count, seeds, a hash of the token stream
 *   config.yaml         the effective config of the run
 *   manifest.json       every file above with its size and FNV-1a 64 hash
 *   hf/                 with checkpoint.hf: the weights as a Hugging Face
 *                       directory (runtime/hf.h), outside the manifest
 * and DIR/latest names the newest one. Full tensors (not shards) make a
 * checkpoint saved at N ranks load at M ranks; the data position is counted
 * in global samples, so the data order continues exactly. Resuming reads
 * the checkpoint's config and state first (checkpoint_open), so the trainer
 * can compare them with its own (config_resume_check) before it builds
 * anything, and every failure is returned, not fatal: all ranks read the
 * same files, reach the same verdict and leave together.
 *
 * Left out: asynchronous saving, sharded (per-rank) files for models that do
 * not fit on rank 0, optimizer state in reduced precision.
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

/* Collective: gathers every unit to rank 0, which writes DIR/step_%08d,
 * syncs it, reads it back against its manifest, then points DIR/latest at
 * it and prunes old ones beyond cfg->ckpt.keep. A failed write (a full disk)
 * or a read-back mismatch is fatal with the file and the cause, and leaves
 * DIR/latest naming the previous checkpoint. */
void checkpoint_save(Fsdp* f, const TrainConfig* cfg, const TrainState* st);

/* path is a step directory or a checkpoint root (then its `latest`).
 * Verifies every file against the manifest and reads state.json and
 * config.yaml into ck. Returns 0, or -1 with the reason in err. */
int checkpoint_open(const char* path, CheckpointInfo* ck, char* err, size_t errlen);

/* Loads this rank's shards of params, m and v from an opened checkpoint
 * (no communication). Returns 0, or -1 naming the file and tensor that do
 * not fit the model in err. */
int checkpoint_load(Fsdp* f, const CheckpointInfo* ck, char* err, size_t errlen);

/* The parameters of an opened checkpoint as whole units, for tools that
 * run without ranks (build/export-hf): *units_out[u] holds
 * llama_unit_numel(&ck->cfg.model, u) floats; free each and the array.
 * Returns 0, or -1 naming the file and tensor. */
int checkpoint_read_params(const CheckpointInfo* ck, float*** units_out, char* err,
                           size_t errlen);

#endif
