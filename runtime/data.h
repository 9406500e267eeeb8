/*
 * data.h — token streams, the train/validation split and who reads what.
 *
 * A data file is either text or pre-tokenized little-endian tokens ("u16"
 * or "i32" .bin). Text is read with tokenizer "byte" (every byte a token,
 * vocabulary 256) or "bpe": a byte-pair encoding with `bpe_merges` merges
 * (vocabulary 256 + merges) trained on the text's training split when the
 * data is opened, deterministically (most frequent adjacent pair first, ties
 * to the smaller pair id), and cached next to the file as PATH.bpeM.cache
 * (merges + tokens, keyed by the text's size, hash and split) with a
 * readable PATH.bpeM.vocab. The last val_fraction of the stream is the
 * validation split (for bpe: of the bytes, before encoding).
 *
 * Each split is cut into non-overlapping windows of T+1 tokens (inputs and
 * shifted targets); window w of a split starts at token w*T of it. Training
 * samples follow a seeded global order: epoch e is a permutation P_e of the
 * W training windows drawn from (seed, e) alone (docs/RUNTIME.md, Data, has
 * the exact shuffle), and global sample g is window P_{g/W}[g mod W], so the
 * order never depends on how many ranks read it or on where a run resumed.
 * A global micro-batch is G = B * nranks consecutive samples; rank r takes
 * samples first+r, first+r+N, first+r+2N, ... of the one that starts at
 * sample `first`: one rank with batch B*N sees exactly the windows that N
 * ranks with batch B see together, and the trainer's data position is one
 * number, the samples consumed. Validation sample g is window g mod W_val in
 * file order, with the same split over ranks.
 *
 * Left out: pre-tokenization (BPE merges may cross word boundaries), document
 * boundaries, streaming files bigger than memory.
 */
#ifndef RUNTIME_DATA_H
#define RUNTIME_DATA_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int* tokens;        /* whole file, train split first */
    size_t n_tokens;
    size_t n_train;     /* tokens [0, n_train) train, the rest validation */
    int T;              /* sequence length */
    size_t n_windows[2];/* windows per split (0 train, 1 val) */
    uint64_t seed;
    /* The permutation of the current epoch (cached: rebuilt when it changes). */
    uint32_t* perm;
    long long perm_epoch;
    int bpe_cached;     /* bpe: 1 if the encoding came from the cache file */
    int rank_blocks;    /* rows b of a rank: samples first + rank*B + b (the
                         * caller sets it for train.rank_invariant: a rank's
                         * share is then the same samples at any rank count) */
} Dataset;

/* Load and split. tokenizer: "byte" | "bpe" | "u16" | "i32" (bpe_merges is
 * read for "bpe" only). Every token must be < vocab. Returns 0, or -1 with a
 * message naming the file. */
int data_open(Dataset* d, const char* path, const char* tokenizer, int bpe_merges, int vocab,
              int T, double val_fraction, uint64_t seed, char* err, size_t errlen);
void data_close(Dataset* d);

/* Fill tokens/targets (B, T) with rank `rank`'s share of the global
 * micro-batch of B*nranks samples that starts at global sample `first`
 * (row b is sample first + rank + b*nranks, or first + rank*B + b with
 * d->rank_blocks). split 0 = train (shuffled,
 * endless epochs), 1 = validation (file order, wrapping). windows, if not
 * NULL, receives the B window indices read (within the split). */
void data_batch(Dataset* d, int split, long long first, int rank, int nranks, int B, int* tokens,
                int* targets, long long* windows);

/* What scripts/prepare_data.py writes beside a token file: PATH.json. */
typedef struct {
    int present;                /* 0: there is no PATH.json */
    char path[1100];            /* PATH.json */
    char dtype[8];              /* "u16" | "i32": data.tokenizer for PATH */
    long long tokens;           /* tokens in PATH */
    long long vocab_size;       /* the tokenizer's vocabulary, special tokens included */
    char tokenizer[1200];       /* the tokenizer.json that made them: its copy
                                 * beside the tokens, or "" */
    long long bos_id, eos_id;   /* the tokens around each document (-1: none) */
} DataMeta;

/* Read and check PATH.json when there is one (m->present = 0 otherwise):
 * a known dtype, and PATH holding exactly the tokens it says (a truncated
 * or replaced token file is refused). Returns 0, or -1 naming the file. */
int data_read_meta(const char* path, DataMeta* m, char* err, size_t errlen);

/* FNV-1a 64 of the token stream and the split point: what a checkpoint
 * records so a resumed run can tell that it reads the same data. */
uint64_t data_hash(const Dataset* d);

#endif
