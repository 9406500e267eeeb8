/*
 * checkpoint.h — save and resume a training run, at any rank count.
 *
 * A checkpoint is a directory DIR/step_00000120/ holding
 *   model.safetensors   full fp32 parameters, one tensor per model tensor,
 *                       named as llama_unit_tensors() names them
 *   optim.safetensors   AdamW state "m.<name>" and "v.<name>", full tensors
 *   state.json          step, samples consumed (the data position), seeds
 *   config.yaml         the effective config of the run
 *   manifest.json       every file above with its size and FNV-1a 64 hash
 * and DIR/latest names the newest one. Full tensors (not shards) make a
 * checkpoint saved at N ranks load at M ranks; the data position is counted
 * in global samples, so the data order continues exactly.
 *
 * Left out: asynchronous saving, sharded (per-rank) files for models that do
 * not fit on rank 0, optimizer state in reduced precision.
 */
#ifndef RUNTIME_CHECKPOINT_H
#define RUNTIME_CHECKPOINT_H
#include <stddef.h>

#include "fsdp.h"

typedef struct {
    int step;                    /* optimizer steps completed */
    long long samples;           /* training samples consumed (global) */
} TrainState;

/* Collective: gathers every unit to rank 0, which writes DIR/step_%08d and
 * prunes old ones beyond cfg->ckpt.keep. */
void checkpoint_save(Fsdp* f, const TrainConfig* cfg, const TrainState* st);

/* Collective: path is a step directory or a checkpoint root (then its
 * `latest`). Verifies the manifest, loads this rank's shards of params, m
 * and v, and the state. Fatal (with the reason) on any mismatch. */
void checkpoint_load(Fsdp* f, const char* path, TrainState* st);

#endif
