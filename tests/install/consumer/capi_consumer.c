/* Uses the installed C ABI as a C program would: reports the library's ABI version, parses a
 * config key and runs it on the CPU backend against an fp64 reference, once plainly and once
 * through the KV-cache entry point. Exit 0 when every step
 * succeeded. */
#include <stdio.h>
#include <string.h>

#include "fusetune/c_api.h"
#include "reference.h"

enum { kLen = 7, kQHeads = 2, kKvHeads = 1, kDim = 32 };

int main(void) {
  static float q[kLen * kQHeads * kDim], k[kLen * kKvHeads * kDim], v[kLen * kKvHeads * kDim];
  static float o[kLen * kQHeads * kDim], o_cache[kLen * kQHeads * kDim];
  char err[256] = "";
  fusetune_handle* handle = NULL;
  fusetune_problem problem;
  fusetune_config config;
  fusetune_kv_cache cache;
  double max_error;
  int rc;

  printf("c_api version: header %d, library %d\n", FUSETUNE_C_API_VERSION, fusetune_api_version());
  if (fusetune_api_version() != FUSETUNE_C_API_VERSION) return 1;

  rc = fusetune_config_from_key("fused/bm16/bs16/t1/fp32/st1", &config, err, sizeof err);
  if (rc != FUSETUNE_OK) {
    printf("config_from_key: %s: %s\n", fusetune_status_name(rc), err);
    return 1;
  }
  memset(&problem, 0, sizeof problem);
  problem.batch = 1;
  problem.q_heads = kQHeads;
  problem.kv_heads = kKvHeads;
  problem.q_len = kLen;
  problem.kv_len = kLen;
  problem.head_dim = kDim;
  problem.causal = 1;
  problem.dtype = FUSETUNE_FP32;
  consumer_fill(q, kLen * kQHeads * kDim, 1);
  consumer_fill(k, kLen * kKvHeads * kDim, 2);
  consumer_fill(v, kLen * kKvHeads * kDim, 3);

  rc = fusetune_create("cpu", 0, &handle, err, sizeof err);
  if (rc != FUSETUNE_OK) {
    printf("create cpu: %s: %s\n", fusetune_status_name(rc), err);
    return 1;
  }
  rc = fusetune_run(handle, &problem, &config, q, k, v, o, err, sizeof err);
  if (rc != FUSETUNE_OK) {
    printf("run: %s: %s\n", fusetune_status_name(rc), err);
    fusetune_destroy(handle);
    return 1;
  }
  /* The same call through the KV-cache entry point: a zeroed cache is a contiguous prefill. */
  memset(&cache, 0, sizeof cache);
  rc = fusetune_run_kv_cache(handle, &problem, &cache, &config, q, k, v, o_cache, err, sizeof err);
  fusetune_destroy(handle);
  if (rc != FUSETUNE_OK || memcmp(o, o_cache, sizeof o) != 0) {
    printf("run_kv_cache: %s: %s\n", fusetune_status_name(rc), rc == FUSETUNE_OK ? "output differs" : err);
    return 1;
  }
  max_error = consumer_max_error(q, k, v, o, kLen, kQHeads, kKvHeads, kDim, 1);
  printf("c_api cpu run: %s, max error %.2e\n", fusetune_status_name(rc), max_error);
  return max_error >= 0 && max_error < 1e-5 ? 0 : 1;
}
