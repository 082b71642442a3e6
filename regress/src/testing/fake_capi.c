/* A stand-in for another commit's libfusetune_capi.so, for capi_backend_test: it says C ABI
 * version FAKE_CAPI_VERSION and knows fusetune_config only as version 1 laid it out (seven
 * fields). fusetune_can_implement, fusetune_run and fusetune_time refuse (UNIMPLEMENTED) with
 * the fields they read, so the test sees what reached the library.
 *
 * With FAKE_CAPI_GRAPH_TIMING it also has fusetune_use_graph_timing (OK, as a CUDA build
 * answers), and fusetune_time succeeds: `repeats` samples of 20 us
 * while graph timing is on, 10 us while it is off, so the test sees what the handle was told. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef FAKE_CAPI_VERSION
#error "FAKE_CAPI_VERSION must be defined"
#endif

typedef struct fake_config_v1 {
  int32_t variant;
  int32_t block_m;
  int32_t block_s;
  int32_t threads;
  int32_t precision;
  int32_t stages;
  int32_t split_kv;
} fake_config_v1;

enum { kOk = 0, kUnimplemented = 12 };

static int handle_storage;
static int graph_timing;

static int Refuse(const fake_config_v1* c, char* err, size_t errlen) {
  if (err != NULL && errlen > 0) {
    snprintf(err, errlen, "fake v%d read %d/%d/%d/%d/%d/%d/%d", FAKE_CAPI_VERSION, c->variant, c->block_m,
             c->block_s, c->threads, c->precision, c->stages, c->split_kv);
  }
  return kUnimplemented;
}

int fusetune_api_version(void) { return FAKE_CAPI_VERSION; }

int fusetune_create(const char* backend, int device, void** out, char* err, size_t errlen) {
  (void)backend;
  (void)device;
  (void)err;
  (void)errlen;
  *out = &handle_storage;
  return kOk;
}

void fusetune_destroy(void* handle) { (void)handle; }

int fusetune_can_implement(void* handle, const void* problem, const fake_config_v1* config, char* err,
                           size_t errlen) {
  (void)handle;
  (void)problem;
  return Refuse(config, err, errlen);
}

int fusetune_run(void* handle, const void* problem, const fake_config_v1* config, const void* q, const void* k,
                 const void* v, void* o, char* err, size_t errlen) {
  (void)handle;
  (void)problem;
  (void)q;
  (void)k;
  (void)v;
  (void)o;
  return Refuse(config, err, errlen);
}

#ifdef FAKE_CAPI_GRAPH_TIMING
int fusetune_use_graph_timing(void* handle, int on, char* err, size_t errlen) {
  (void)handle;
  (void)err;
  (void)errlen;
  graph_timing = on != 0;
  return kOk;
}
#endif

int fusetune_time(void* handle, const void* problem, const fake_config_v1* config, const void* q, const void* k,
                  const void* v, void* o, int warmup, int repeats, double max_seconds, int flush_l2,
                  double* median_us, double* samples_us, int capacity, int* count, char* err, size_t errlen) {
#ifdef FAKE_CAPI_GRAPH_TIMING
  const double us = graph_timing ? 20.0 : 10.0;
  *count = 0;
  for (int i = 0; i < repeats && i < capacity; ++i) {
    samples_us[i] = us;
    *count = i + 1;
  }
  *median_us = us;
  return kOk;
#endif
  (void)graph_timing;
  (void)handle;
  (void)problem;
  (void)q;
  (void)k;
  (void)v;
  (void)o;
  (void)warmup;
  (void)repeats;
  (void)max_seconds;
  (void)flush_l2;
  (void)median_us;
  (void)samples_us;
  (void)capacity;
  (void)count;
  return Refuse(config, err, errlen);
}
