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
 * function removed); adding functions keeps it. Version 2 appended pingpong and persistent
 * to fusetune_config; the first seven fields keep version 1's offsets, so a version-1 library
 * reads a version-2 struct whose pingpong and persistent are 0 as the same config (a config
 * that sets either cannot be said to it), and writes only those seven fields of a struct it
 * fills in (fusetune_config_from_key, fusetune_default_config: zero it first).
 *
 * Thread-safety: a handle is not thread-safe (one handle per thread and device); distinct
 * handles may be used concurrently. fusetune_run is synchronous: O is complete on return,
 * and the CUDA backend works on the legacy default stream. fusetune_run_on_stream is for
 * inference code: it launches on the caller's stream and returns at once (below). The
 * functions without a handle (problem and config keys, defaults) are thread-safe; a database
 * opened with fusetune_db_open is safe to read from several threads (calls are serialised).
 */
#ifndef FUSETUNE_C_API_H_
#define FUSETUNE_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FUSETUNE_C_API_VERSION 2

/* Status codes (values equal absl::StatusCode where one exists). */
typedef enum fusetune_status {
  FUSETUNE_OK = 0,
  FUSETUNE_INVALID_ARGUMENT = 3,   /* bad problem, config, pointer or name */
  FUSETUNE_NOT_FOUND = 5,          /* unknown backend name; no database at the path */
  FUSETUNE_PERMISSION_DENIED = 7,  /* a database file that may not be read */
  FUSETUNE_RESOURCE_EXHAUSTED = 8, /* out of device memory */
  FUSETUNE_FAILED_PRECONDITION = 9,/* config over a device limit (shared memory, workspace) */
  FUSETUNE_UNIMPLEMENTED = 12,     /* valid but unsupported here (e.g. head_dim 96 on CUDA) */
  FUSETUNE_INTERNAL = 13,          /* launch or device error */
  FUSETUNE_UNAVAILABLE = 14,       /* backend compiled out, or no device/driver; database locked */
  FUSETUNE_DATA_LOSS = 15,         /* a damaged database, or not an SQLite file */
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
  /* Version 2 (appended, so the fields above keep their offsets). 0 or 1 (anything else:
   * INVALID_ARGUMENT); GPU only, the Hopper fused kernel (config.h). */
  int32_t pingpong;   /* consumer warpgroups alternate their GEMMs (key /pingpong) */
  int32_t persistent; /* one block per multiprocessor loops over the tiles (key /persistent) */
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

/* K and V stored as FP8 e4m3 (problem.h's KvStorage): one byte per element (OCP e4m3: 4
 * exponent bits of bias 7, 3 mantissa bits, largest 448, 0x7f/0xff NaN) and kv_heads fp32
 * scales each for K and V; key j of KV head h stands for e4m3(byte) * k_scale[h] (values alike).
 * Scales are device memory for cuda (read by the kernel; fusetune_run_kv_quant and
 * fusetune_time_kv_quant copy them back to check them), host memory for cpu; finite and >= 0.
 * Q and O stay in problem.dtype (fp16 or bf16). Passed beside the problem to the *_kv_quant
 * functions; storage FUSETUNE_KV_DTYPE (0) means K/V in problem.dtype, as the functions without
 * the suffix (scales then NULL). */
typedef enum fusetune_kv_storage { FUSETUNE_KV_DTYPE = 0, FUSETUNE_KV_E4M3 = 1 } fusetune_kv_storage;
typedef struct fusetune_kv_quant {
  int32_t storage;      /* fusetune_kv_storage */
  const float* k_scale; /* e4m3: kv_heads scales of K; else NULL */
  const float* v_scale; /* e4m3: kv_heads scales of V; else NULL */
} fusetune_kv_quant;

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

/* ---------------------------------------------------------------- inference on a stream */

/* Where fusetune_run_on_stream launches, and the per-sequence lengths its kernels read there. */
typedef struct fusetune_launch {
  void* stream;                 /* cudaStream_t; NULL = the legacy default stream. cpu: NULL only */
  /* cuda, varlen problem: device copies of problem.cu_seqlens_q/k (the same values; the
   * problem's host arrays are still what is validated). cpu: ignored, NULL. */
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  /* Uniform batch: the visible keys of each sequence (batch entries; device memory for cuda,
   * host memory for cpu), read when the kernel runs, so they may change between launches (a
   * CUDA graph captured once and replayed as the caches grow). problem.kv_valid_lens must then
   * be NULL and kv_len is the capacity: the launch is planned for any counts in [0, kv_len].
   * cpu checks the values (INVALID_ARGUMENT); cuda cannot without synchronizing: a value
   * outside [0, kv_len] is the caller's error. NULL = kv_len keys for every sequence. */
  const int32_t* kv_valid_lens;
} fusetune_launch;

/* Computes O = attention(Q, K, V) as fusetune_run / fusetune_run_kv_cache (`cache` NULL: a
 * contiguous prefill) but asynchronously, on launch->stream (`launch` NULL: all fields zero):
 * enqueues the kernel and returns. It never synchronizes with the device, never copies host
 * memory to it and, on the CUDA backend, allocates device memory only when a problem needs
 * more workspace than earlier calls on the handle did (decode with KV splits); while the
 * stream is being captured into a CUDA graph that is FAILED_PRECONDITION instead, so launch a
 * shape once before capturing it. The handle's calls share that workspace: order them on the
 * device (one stream, or streams that wait for each other). On CUDA: the fused variant only
 * (UNIMPLEMENTED for the baselines), and a paged cache's block table is read by the kernel
 * only: its entries are not checked (a check needs a copy back) and must name pool pages.
 * The cpu backend computes O before returning. Errors found here leave O untouched; a fault
 * while the kernel runs shows at the caller's next synchronization. */
int fusetune_run_on_stream(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                           const fusetune_config* config, const void* q, const void* k, const void* v, void* o,
                           const fusetune_launch* launch, char* err, size_t errlen);

/* The *_kv_cache (or, with `cache` NULL, the plain) calls over K/V stored as `quant` says
 * (non-NULL). The problem key of an e4m3 problem ends in "/kve4m3". */
int fusetune_can_implement_kv_quant(fusetune_handle* handle, const fusetune_problem* problem,
                                    const fusetune_kv_cache* cache, const fusetune_kv_quant* quant,
                                    const fusetune_config* config, char* err, size_t errlen);
int fusetune_run_kv_quant(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                          const fusetune_kv_quant* quant, const fusetune_config* config, const void* q, const void* k,
                          const void* v, void* o, char* err, size_t errlen);
int fusetune_time_kv_quant(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                           const fusetune_kv_quant* quant, const fusetune_config* config, const void* q, const void* k,
                           const void* v, void* o, int warmup, int repeats, double max_seconds, int flush_l2,
                           double* median_us, double* samples_us, int capacity, int* count, char* err, size_t errlen);
int fusetune_run_on_stream_kv_quant(fusetune_handle* handle, const fusetune_problem* problem,
                                    const fusetune_kv_cache* cache, const fusetune_kv_quant* quant,
                                    const fusetune_config* config, const void* q, const void* k, const void* v, void* o,
                                    const fusetune_launch* launch, char* err, size_t errlen);
int fusetune_problem_key_kv_quant(const fusetune_problem* problem, const fusetune_kv_cache* cache,
                                  const fusetune_kv_quant* quant, char* key, size_t keylen, char* err, size_t errlen);

/* ---------------------------------------------------------------- scratch placement */

/* Scratch in memory the caller provides (kernels/backend.h, Backend::UseScratchArena). A launch
 * uses scratch besides O, which a handle allocates itself and keeps; two handles timed side by
 * side on the same inputs then differ in where it lies, and that alone can move a kernel's time
 * by a few per cent for the handles' lives. Given one arena, both lay their scratch out at the
 * same addresses.
 *
 * fusetune_scratch_bytes: the arena bytes a run or time of (problem, cache, quant, config) needs,
 * into *bytes (`cache` and `quant` may be NULL, as for the calls without them); never launches.
 * UNIMPLEMENTED where the handle's backend cannot use an arena (cuda so far).
 *
 * fusetune_use_scratch_arena: from now on the handle's run and time calls lay every scratch
 * buffer out in [base, base + bytes), device memory (host memory for cpu), 64-byte aligned
 * (INVALID_ARGUMENT otherwise), which the caller keeps alive and leaves alone during those calls;
 * base NULL: the handle's own memory again. Contents are undefined at each launch, so handles may
 * take turns in one arena. A launch needing more than `bytes` is FAILED_PRECONDITION, O
 * untouched. UNIMPLEMENTED where the backend cannot use one; fusetune_use_scratch_arena(h, NULL,
 * 0, ...) is OK exactly where it can. Libraries built before these two functions lack them. */
int fusetune_scratch_bytes(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                           const fusetune_kv_quant* quant, const fusetune_config* config, size_t* bytes, char* err,
                           size_t errlen);
int fusetune_use_scratch_arena(fusetune_handle* handle, void* base, size_t bytes, char* err, size_t errlen);

/* ---------------------------------------------------------------- graph-timed blocks */

/* Blocks timed as one CUDA graph (kernels/backend.h, TimingOptions::graph): a fusetune_time*
 * call queues all its timed launches before waiting for the first, and with launches of 10-25 µs
 * the host can fall behind the GPU, so that a sample holds a wait for the host. With graph timing
 * on, the whole block (each launch with its L2 flush and its pair of events) is captured into one
 * CUDA graph and launched once, and the GPU runs it back to back.
 *
 * fusetune_use_graph_timing: from now on the handle's fusetune_time* calls time their blocks
 * through a graph (on != 0) or launch by launch (on == 0, the default). UNIMPLEMENTED where the
 * backend cannot (cpu, hip; and cuda libraries that kept graph timing behind
 * FUSETUNE_CUDA_GRAPH_TIMING=1, before it was run on a GPU), and the handle then times launch by launch;
 * fusetune_use_graph_timing(h, 0, ...) is OK exactly where it can, so it doubles as the question.
 * Libraries built before this function lack it. */
int fusetune_use_graph_timing(fusetune_handle* handle, int on, char* err, size_t errlen);

/* Worker threads lent by the caller (kernels/backend.h, Backend::UseWorkers): the cpu backend
 * runs a launch's tasks on threads it keeps, and two handles timed side by side then run on
 * different threads, which a loaded host can schedule differently for a whole run. From now on
 * the handle's launches call workers->parallel_for(context, n, tasks, body, body_context), which
 * must call body(body_context, task, worker) once for every task in [0, tasks) on n threads (the
 * calling thread worker 0, every worker index below n) and return when all have returned; the
 * pool must stay valid during the handle's calls. NULL: the handle's own threads again.
 * INVALID_ARGUMENT for a NULL parallel_for; UNIMPLEMENTED where launches do not run on host
 * threads (cuda); fusetune_use_workers(h, NULL, ...) is OK exactly where they do. */
typedef struct fusetune_workers {
  void* context;
  void (*parallel_for)(void* context, int workers, int64_t tasks,
                       void (*body)(void* body_context, int64_t task, int worker), void* body_context);
} fusetune_workers;
int fusetune_use_workers(fusetune_handle* handle, const fusetune_workers* workers, char* err, size_t errlen);
/* (Libraries built before fusetune_use_workers lack it.) */

/* ---------------------------------------------------------------- problems and configs */

/* OK when the problem (with `cache`, which may be NULL) is valid: the checks every run makes,
 * INVALID_ARGUMENT with a message naming the field otherwise. */
int fusetune_problem_validate(const fusetune_problem* problem, const fusetune_kv_cache* cache, char* err,
                              size_t errlen);
/* Writes the problem's canonical key (e.g. "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32"),
 * the key the tuner records and the service answers for, NUL-terminated into key[0..keylen).
 * INVALID_ARGUMENT for an invalid problem or a buffer too small for the key (its message says
 * the size needed; keys are under 256 bytes). */
int fusetune_problem_key(const fusetune_problem* problem, const fusetune_kv_cache* cache, char* key,
                         size_t keylen, char* err, size_t errlen);
/* Writes the config's canonical key (the inverse of fusetune_config_from_key), as above;
 * INVALID_ARGUMENT for a config out of range. */
int fusetune_config_key(const fusetune_config* config, char* key, size_t keylen, char* err, size_t errlen);
/* The config the backend of `device_class` (its text before the first '/': "cuda" for
 * "cuda/NVIDIA-H200/sm90") runs when nothing better is known for the problem: the service's
 * DEFAULT answer and the C++ client cache's fallback (kernels/default_config.h); a class whose
 * backend is unknown, or empty, gets the cpu one. INVALID_ARGUMENT for an invalid problem. */
int fusetune_default_config(const char* device_class, const fusetune_problem* problem,
                            const fusetune_kv_cache* cache, fusetune_config* out, char* err, size_t errlen);
/* Writes the handle's device class (e.g. "cuda/NVIDIA-H200/sm90"), the key of tuned configs. */
int fusetune_device_class(fusetune_handle* handle, char* buf, size_t buflen);
/* The largest max|out - ref| / max|ref| the library's verification accepts for a precision
 * (fusetune_precision) and a storage dtype (fusetune_dtype) on inputs uniform in [-1, 1] with
 * the default scale (kernels/reference.h ToleranceFor: the one table of tolerances), into
 * *tolerance. INVALID_ARGUMENT for an unknown precision or dtype, or a NULL tolerance. */
int fusetune_tolerance(int precision, int dtype, double* tolerance);
/* The seed shapes (the `seed` preset, kernels/problem.h SeedPresetProblems): writes the first
 * min(capacity, *count) of them to out[0..capacity) (length arrays NULL) and their number to
 * *count. INVALID_ARGUMENT for a NULL count, or a NULL out with capacity > 0. */
int fusetune_seed_problems(fusetune_problem* out, size_t capacity, size_t* count);

/* ---------------------------------------------------------------- reading a database */

/* A fusetune database (SQLite, db/README.md) opened for reading only, as `fusetune report` and
 * `fusetune best` open it: never created, upgraded or changed. */
typedef struct fusetune_db fusetune_db;

/* Opens the database at `path`. NOT_FOUND when there is no file (nothing is created);
 * FAILED_PRECONDITION for a schema version other than this library's, another program's file,
 * or changes in <path>-wal this process cannot read (a read-only directory: the message says
 * how to fold them in); DATA_LOSS, PERMISSION_DENIED, UNAVAILABLE as db/README.md's table. Every
 * message names the file. *out is NULL on failure. */
int fusetune_db_open(const char* path, fusetune_db** out, char* err, size_t errlen);
/* Closes the database; NULL is ignored. */
void fusetune_db_close(fusetune_db* db);
/* Each of the reads below writes a JSON array of objects, one per row, into *json (free it with
 * fusetune_free_text; NULL on failure). The fields are those of the records they mirror
 * (BestConfig and AuditSummary in records/run.h, Trial in records/trial.h, Regression in
 * db/store.h), in snake_case; a number that is not finite is the string "nan", "inf" or "-inf".
 * NULL or "" filters match everything. */
/* Best configs of `device_class`, by device class and problem key. */
int fusetune_db_best_configs(fusetune_db* db, const char* device_class, char** json, char* err, size_t errlen);
/* Trials of run `run_id` (> 0; of `problem_key` only when given), in insertion order; or, with
 * run_id 0, the newest `limit` trials of `problem_key` on `device_class` (both required) across
 * runs. A trial's "blocks" are its timing blocks with the device state around each. */
int fusetune_db_trials(fusetune_db* db, int64_t run_id, const char* device_class, const char* problem_key,
                       int limit, char** json, char* err, size_t errlen);
/* Regression verdicts of `commit`, newest first, at most `limit` (1..100000). */
int fusetune_db_regressions(fusetune_db* db, const char* commit, int limit, char** json, char* err,
                            size_t errlen);
/* Audits, newest first, at most `limit` (1..100000). */
int fusetune_db_audits(fusetune_db* db, const char* device_class, const char* problem_key, int limit, char** json,
                       char* err, size_t errlen);
/* Frees text returned by this library; NULL is ignored. */
void fusetune_free_text(char* text);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FUSETUNE_C_API_H_ */
