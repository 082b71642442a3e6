/* A naive fp64 attention for the consumers' checks: one uniform batch, fp32 tensors in
 * fusetune's layout (Q, O: [tokens][q_heads][d]; K, V: [tokens][kv_heads][d]), causal masks
 * bottom-right aligned. Plain C, used by the C and the C++ consumer. */
#ifndef FUSETUNE_CONSUMER_REFERENCE_H_
#define FUSETUNE_CONSUMER_REFERENCE_H_

#include <math.h>
#include <stdlib.h>

/* Deterministic inputs in [-0.5, 0.5). */
static void consumer_fill(float* x, int n, int seed) {
  int i;
  for (i = 0; i < n; ++i) x[i] = (float)(((i + 1) * (seed * 2 + 7)) % 23) / 23.0f - 0.5f;
}

/* Largest |o - reference| over the whole output; a negative value when allocation fails. */
static double consumer_max_error(const float* q, const float* k, const float* v, const float* o,
                                 int len, int q_heads, int kv_heads, int d, int causal) {
  double worst = 0;
  double* p = (double*)malloc(sizeof(double) * (size_t)len);
  int i, h, j, c, group = q_heads / kv_heads;
  if (p == NULL) return -1;
  for (i = 0; i < len; ++i) {
    for (h = 0; h < q_heads; ++h) {
      const int kh = h / group, visible = causal ? i + 1 : len;
      double m = -INFINITY, l = 0;
      for (j = 0; j < visible; ++j) {
        double s = 0;
        for (c = 0; c < d; ++c)
          s += (double)q[((size_t)i * q_heads + h) * d + c] * k[((size_t)j * kv_heads + kh) * d + c];
        p[j] = s / sqrt((double)d);
        if (p[j] > m) m = p[j];
      }
      for (j = 0; j < visible; ++j) l += (p[j] = exp(p[j] - m));
      for (c = 0; c < d; ++c) {
        double ref = 0, err;
        for (j = 0; j < visible; ++j) ref += p[j] * v[((size_t)j * kv_heads + kh) * d + c];
        err = fabs(ref / l - o[((size_t)i * q_heads + h) * d + c]);
        if (!(err <= worst)) worst = err; /* NaN propagates as a failure */
      }
    }
  }
  free(p);
  return worst;
}

#endif /* FUSETUNE_CONSUMER_REFERENCE_H_ */
