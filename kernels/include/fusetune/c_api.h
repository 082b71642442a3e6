/* fusetune C ABI: run one variant and config of the attention kernel family on
 * caller-provided tensors, from any language with a C FFI (Python ctypes, Rust, Go, ...).
 *
 * Built as the shared library libfusetune_capi.so; only the fusetune_* symbols below are
 * exported. Tensors use the layout of fusetune/kernels/problem.h:
 *   Q, O : [total_q][q_heads][head_dim],  K, V : [total_k][kv_heads][head_dim]
 * in the problem's storage dtype, as device pointers for the "cuda" backend and host
 * pointers for the "cpu" backend, each 16-byte aligned (INVALID_ARGUMENT otherwise). Length
 * arrays in fusetune_problem are HOST arrays.
 *
 * A KV cache (decode, or prefill over cached keys) and a paged K/V pool go through the
 * *_kv_cache functions with a fusetune_kv_cache beside the problem.
 *
 * Every function returns a fusetune_status code; on failure it writes a NUL-terminated
 * message into err[0..errlen) when err is non-NULL (truncated to fit).
 *
 * Compatibility: FUSETUNE_C_API_VERSION is the ABI's version and the library's soname
 * (libfusetune_capi.so.<version>). It changes with anything that breaks a caller built
 * against an earlier header (a struct layout, a signature or an enum value changed, a
 * function removed); adding functions keeps it.
 *
 * Thread-safety: a handle is not thread-safe (one handle per thread and device); distinct
 * handles may be used concurrently. fusetune_run is synchronous: O is complete on return,
 * and the CUDA backend works on the legacy default stream.
 */
#ifndef FUSETUNE_C_API_H_
#define FUSETUNE_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FUSETUNE_C_API_VERSION 1

/* Status codes (values equal absl::StatusCode where one exists). */
typedef enum fusetune_status {
  FUSETUNE_OK = 0,
  FUSETUNE_INVALID_ARGUMENT = 3,   /* bad problem, config, pointer or name */
  FUSETUNE_NOT_FOUND = 5,          /* unknown backend name */
  FUSETUNE_RESOURCE_EXHAUSTED = 8, /* out of device memory */
  FUSETUNE_FAILED_PRECONDITION = 9,/* config over a device limit (shared memory, workspace) */
  FUSETUNE_UNIMPLEMENTED = 12,     /* valid but unsupported here (e.g. head_dim 96 on CUDA) */
  FUSETUNE_INTERNAL = 13,          /* launch or device error */
  FUSETUNE_UNAVAILABLE = 14,       /* backend compiled out, or no device/driver */
  FUSETUNE_UNKNOWN = 2             /* anything else */
} fusetune_status;

typedef enum fusetune_dtype { FUSETUNE_FP32 = 0, FUSETUNE_FP16 = 1, FUSETUNE_BF16 = 2 } fusetune_dtype;
typedef enum fusetune_variant {
  FUSETUNE_FUSED = 0,
  FUSETUNE_PARTIAL = 1,
  FUSETUNE_MATERIALIZED = 2
} fusetune_variant;
typedef enum fusetune_precision {
  FUSETUNE_PRECISION_FP32 = 0,
  FUSETUNE_PRECISION_TF32 = 1,
  FUSETUNE_PRECISION_FP16 = 2,
  FUSETUNE_PRECISION_BF16 = 3
} fusetune_precision;

/* One attention call's shape (see problem.h for the masks). */
typedef struct fusetune_problem {
  int32_t batch;
  int32_t q_heads;
  int32_t kv_heads;         /* divides q_heads (GQA/MQA when smaller) */
  int32_t q_len;            /* uniform length, or the longest sequence when varlen */
  int32_t kv_len;
  int32_t head_dim;
  int32_t causal;           /* 0 or 1 (anything else: INVALID_ARGUMENT), bottom-right aligned */
  int32_t dtype;            /* fusetune_dtype */
  float softmax_scale;      /* 0 = 1/sqrt(head_dim) */
  const int32_t* cu_seqlens_q;  /* varlen: batch+1 prefix sums (host), or NULL */
  const int32_t* cu_seqlens_k;  /* varlen: batch+1 prefix sums (host), or NULL */
  const int32_t* kv_valid_lens; /* uniform batch key padding: batch counts (host), or NULL */
} fusetune_problem;

/* One point of the tunable space (see config.h). */
typedef struct fusetune_config {
  int32_t variant;    /* fusetune_variant */
  int32_t block_m;
  int32_t block_s;
  int32_t threads;    /* GPU: threads per block; CPU: worker threads */
  int32_t precision;  /* fusetune_precision */
  int32_t stages;
  int32_t split_kv;
} fusetune_config;

/* The KV cache of a problem (problem.h's decode kind and paged fields). Decode: 1..16 new
 * query tokens per sequence (q_len), each sequence's cache lengths in kv_valid_lens (or
 * kv_len for all), the new tokens' own keys included and causal among themselves when
 * problem.causal is 1. Paged (page_block_size > 0): K and V are a pool
 *   [pool pages][page_block_size][kv_heads][head_dim]
 * and block_table an int32 [batch][block-table width] array mapping sequence b's key j to row
 * j % page_block_size of page block_table[b * width + j / page_block_size] (pages in any
 * order, shared between sequences as one likes; every entry a sequence reads must be in
 * [0, pool pages): the backend checks before it reads, INVALID_ARGUMENT otherwise). Zeroed,
 * it is a contiguous prefill, as fusetune_run. */
typedef struct fusetune_kv_cache {
  int32_t decode;              /* 1 = decode, 0 = prefill (anything else: INVALID_ARGUMENT) */
  int32_t page_block_size;     /* tokens per page, 1..256; 0 = contiguous K/V */
  int32_t pool_pages;          /* pages in the pool; 0 = the pages the sequences need */
  int32_t block_table_width;   /* entries per block-table row; 0 = ceil(kv_len / page_block_size) */
  int32_t shared_prefix_pages; /* leading pages every sequence shares (describes the shape only) */
  const int32_t* block_table;  /* paged: device pointer (cuda) or host pointer (cpu); else NULL */
} fusetune_kv_cache;

typedef struct fusetune_handle fusetune_handle;

/* FUSETUNE_C_API_VERSION of the loaded library. */
int fusetune_api_version(void);
/* A static string naming a status code, e.g. "UNIMPLEMENTED". */
const char* fusetune_status_name(int status);

/* Creates a backend ("cpu" or "cuda") on device `device`; *out is NULL on failure. */
int fusetune_create(const char* backend, int device, fusetune_handle** out, char* err,
                    size_t errlen);
/* Frees the handle and its workspace; NULL is ignored. */
void fusetune_destroy(fusetune_handle* handle);

/* Writes a one-line device description (name, arch, SMs, memory, driver) into buf. */
int fusetune_describe(fusetune_handle* handle, char* buf, size_t buflen);

/* Parses a canonical config key such as "fused/bm64/bs64/t128/bf16/st2". */
int fusetune_config_from_key(const char* key, fusetune_config* out, char* err, size_t errlen);

/* FUSETUNE_OK when fusetune_run could run this (problem, config); never launches. */
int fusetune_can_implement(fusetune_handle* handle, const fusetune_problem* problem,
                           const fusetune_config* config, char* err, size_t errlen);

/* Computes O = attention(Q, K, V). O is untouched when the problem/config is rejected. */
int fusetune_run(fusetune_handle* handle, const fusetune_problem* problem,
                 const fusetune_config* config, const void* q, const void* k, const void* v,
                 void* o, char* err, size_t errlen);

/* Times the variant as the tuner does: `warmup` untimed runs, then up to `repeats` runs
 * (stopping after max_seconds once 3 are kept), each timed alone (CUDA: events around the
 * launch, L2 flushed first when flush_l2 != 0). Writes the kept samples in microseconds to
 * samples_us[0..*count) (at most `capacity`) and the median to *median_us; O is
 * overwritten with the result. */
int fusetune_time(fusetune_handle* handle, const fusetune_problem* problem,
                  const fusetune_config* config, const void* q, const void* k, const void* v,
                  void* o, int warmup, int repeats, double max_seconds, int flush_l2,
                  double* median_us, double* samples_us, int capacity, int* count, char* err,
                  size_t errlen);

/* The same three against a KV cache (`cache` non-NULL; block_table may be NULL for
 * fusetune_can_implement_kv_cache, which reads no memory). A paged cache needs block_table
 * (INVALID_ARGUMENT when NULL or misaligned) and a contiguous one none. */
int fusetune_can_implement_kv_cache(fusetune_handle* handle, const fusetune_problem* problem,
                                    const fusetune_kv_cache* cache, const fusetune_config* config, char* err,
                                    size_t errlen);
int fusetune_run_kv_cache(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                          const fusetune_config* config, const void* q, const void* k, const void* v, void* o,
                          char* err, size_t errlen);
int fusetune_time_kv_cache(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                           const fusetune_config* config, const void* q, const void* k, const void* v, void* o,
                           int warmup, int repeats, double max_seconds, int flush_l2, double* median_us,
                           double* samples_us, int capacity, int* count, char* err, size_t errlen);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FUSETUNE_C_API_H_ */
