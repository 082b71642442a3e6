/* Compiled as C: proves c_api.h is plain C and drives the ABI the way a C caller would. */
#include <string.h>

#include "fusetune/c_api.h"

/* Runs a 1x2x5x5 d32 fp32 problem on the CPU backend; returns the status code and writes
 * O (2*5*32 floats) into `o`. */
int fusetune_c_smoke(float* o, char* err, size_t errlen) {
  static float q[5 * 2 * 32], k[5 * 1 * 32], v[5 * 1 * 32];
  fusetune_handle* h = NULL;
  fusetune_problem p;
  fusetune_config c;
  int i, rc;
  for (i = 0; i < 5 * 2 * 32; ++i) q[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
  for (i = 0; i < 5 * 32; ++i) {
    k[i] = (float)((i * 11) % 13) / 13.0f - 0.5f;
    v[i] = (float)((i * 7) % 19) / 19.0f - 0.5f;
  }
  memset(&p, 0, sizeof p);
  p.batch = 1;
  p.q_heads = 2;
  p.kv_heads = 1;
  p.q_len = 5;
  p.kv_len = 5;
  p.head_dim = 32;
  p.causal = 1;
  p.dtype = FUSETUNE_FP32;
  memset(&c, 0, sizeof c);
  c.variant = FUSETUNE_FUSED;
  c.block_m = 16;
  c.block_s = 16;
  c.threads = 1;
  c.precision = FUSETUNE_PRECISION_FP32;
  c.stages = 1;
  c.split_kv = 1;
  rc = fusetune_create("cpu", 0, &h, err, errlen);
  if (rc != FUSETUNE_OK) return rc;
  rc = fusetune_run(h, &p, &c, q, k, v, o, err, errlen);
  fusetune_destroy(h);
  return rc;
}

/* The smoke problem's inputs, for the caller's reference computation. */
void fusetune_c_smoke_inputs(float* q, float* k, float* v) {
  int i;
  for (i = 0; i < 5 * 2 * 32; ++i) q[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
  for (i = 0; i < 5 * 32; ++i) {
    k[i] = (float)((i * 11) % 13) / 13.0f - 0.5f;
    v[i] = (float)((i * 7) % 19) / 19.0f - 0.5f;
  }
}
