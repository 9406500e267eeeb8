/*
 * safetensors.h — read and write the safetensors file format.
 *
 * Used for checkpoints and tensor dumps (the trainer); zipccl-codec-bench,
 * which links libzipccl alone, reads the dumps with a short reader of its
 * own.  A file is
 *
 *   u64 LE  N                 length of the JSON header
 *   N bytes JSON              {"name": {"dtype": "BF16", "shape": [2, 3],
 *                                       "data_offsets": [begin, end]}, ...,
 *                              "__metadata__": {"key": "value", ...}}
 *   data                      offsets are relative to the byte after the header
 *
 * The reader validates everything before handing out a tensor: a sane header
 * length, strict well-formed JSON (objects, arrays, strings, integers — the
 * only JSON safetensors uses), known dtypes, shape × dtype size == byte
 * length, offsets inside the file and not overlapping, the data indexed
 * entirely (no holes, nothing after the last tensor: the format's rule),
 * no duplicate names.
 * A bad file gets an error message that names the problem, never a crash.
 *
 * Left out: memory mapping (st_read copies with pread; the offset is exposed
 * for callers that want to map the file themselves), dtype conversion, and
 * the 1-byte float dtypes' semantics (they are known and sized, no more).
 *
 * Every function that can fail returns 0 on success and -1 on failure, and
 * writes a NUL-terminated message into err[errlen] (err may be NULL).
 */
#ifndef ZRT_SAFETENSORS_H
#define ZRT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ST_MAX_DIMS 8
/* Largest JSON header accepted (the reference implementation's limit). */
#define ST_MAX_HEADER_BYTES (100u * 1024u * 1024u)

/* Bytes per element of a safetensors dtype name ("F32", "BF16", ...), or 0
 * when the name is not a dtype of the format. */
size_t st_dtype_size(const char* dtype);

/* ---- writer ------------------------------------------------------------- */

typedef struct st_writer st_writer;

/* Start an empty file description.  NULL only when out of memory. */
st_writer* st_writer_begin(void);

/* Add a tensor.  The data is NOT copied: it must stay valid and unchanged
 * until st_writer_write returns (checkpoints add parameter buffers and write
 * once, so copying them would double peak memory).  bytes must equal
 * product(shape) × st_dtype_size(dtype); ndim may be 0 (a scalar). */
int st_writer_add(st_writer* w, const char* name, const char* dtype, int ndim,
                  const int64_t* shape, const void* data, size_t bytes, char* err,
                  size_t errlen);

/* Set a "__metadata__" entry; setting a key again replaces its value. */
int st_writer_set_metadata(st_writer* w, const char* key, const char* value, char* err,
                           size_t errlen);

/* Write the file atomically: to "<path>.tmp", flushed and fsync'ed, then
 * renamed over path, so a reader never sees half a file.  Tensors are laid out
 * in the order they were added.  The writer stays usable (write again, or
 * free it). */
int st_writer_write(st_writer* w, const char* path, char* err, size_t errlen);

void st_writer_free(st_writer* w);

/* ---- reader ------------------------------------------------------------- */

typedef struct {
    const char* name;           /* owned by the st_file                      */
    char dtype[8];              /* "F32", "BF16", "F16", "I64", ...          */
    size_t elem_size;           /* st_dtype_size(dtype)                      */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel;             /* product(shape) (1 for a scalar)           */
    uint64_t bytes;             /* numel × elem_size                         */
    uint64_t offset;            /* absolute byte offset of the data in file  */
} st_tensor;

typedef struct st_file st_file;

/* Open and validate a file; the header is parsed now, data is read lazily. */
int st_open(const char* path, st_file** out, char* err, size_t errlen);

/* Tensors in header order. */
size_t st_num_tensors(const st_file* f);
const st_tensor* st_tensor_at(const st_file* f, size_t i);
/* NULL when there is no tensor of that name. */
const st_tensor* st_find(const st_file* f, const char* name);

/* Copy a tensor's bytes (t from this file) into dst, which holds at least
 * t->bytes bytes.  Fails cleanly if the file was truncated since st_open. */
int st_read(const st_file* f, const st_tensor* t, void* dst, size_t dst_capacity, char* err,
            size_t errlen);
/* Copy bytes [begin, begin + n) of a tensor's data into dst (n bytes): one
 * expert's rows of a stacked tensor without reading the others. */
int st_read_range(const st_file* f, const st_tensor* t, uint64_t begin, size_t n, void* dst,
                  char* err, size_t errlen);

/* Metadata value for key, or NULL. */
const char* st_get_metadata(const st_file* f, const char* key);
size_t st_num_metadata(const st_file* f);
/* i-th metadata entry (header order); 0 on success, -1 if out of range. */
int st_metadata_at(const st_file* f, size_t i, const char** key, const char** value);

void st_close(st_file* f);

#ifdef __cplusplus
}
#endif
#endif /* ZRT_SAFETENSORS_H */
