/* The LibTorch plugin's interface: plain C, so that the plugin can be built against any torch (its
 * headers, its C++ ABI, its compiler flags) while sdpa-doctor-torch-worker, which links no torch,
 * loads it with dlopen. The worker and the plugin are always built from the same source (a built
 * plugin is cached under a hash of it), so a version mismatch means a stale file: refused.
 *
 * Strings the plugin returns are allocated by it and released with free_text; every text is one
 * line (no newline, no tab) unless said otherwise. */
#ifndef SDPA_DOCTOR_TORCH_PLUGIN_H
#define SDPA_DOCTOR_TORCH_PLUGIN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SDPA_TORCH_PLUGIN_VERSION 4
#define SDPA_TORCH_PLUGIN_ENTRY "sdpa_torch_plugin_v4"

enum sdpa_plugin_dtype { SDPA_PLUGIN_F16 = 0, SDPA_PLUGIN_BF16 = 1, SDPA_PLUGIN_F32 = 2 };
enum sdpa_plugin_mask { SDPA_PLUGIN_MASK_NONE = 0, SDPA_PLUGIN_MASK_BOOL = 1, SDPA_PLUGIN_MASK_ADDITIVE = 2 };
/* Causal attention's diagonal: top-left is torch's is_causal, bottom-right its causal_lower_right
 * (query i sees key j <= i + Lkv - Lq). */
enum sdpa_plugin_causal {
  SDPA_PLUGIN_CAUSAL_NONE = 0,
  SDPA_PLUGIN_CAUSAL_TOP_LEFT = 1,
  SDPA_PLUGIN_CAUSAL_BOTTOM_RIGHT = 2
};
/* Case's Layout: transposed is a (B,L,H,D) buffer viewed as (B,H,L,D); strided the first part of
 * each row of a wider buffer (2D for q, k and v; round_up(Lkv, 16) + 1 for a mask); offset one
 * element into its storage. */
enum sdpa_plugin_layout {
  SDPA_PLUGIN_CONTIGUOUS = 0,
  SDPA_PLUGIN_TRANSPOSED = 1,
  SDPA_PLUGIN_STRIDED = 2,
  SDPA_PLUGIN_OFFSET = 3
};
/* Case's MaskShape: (B,1,Lq,Lkv), (B,H,Lq,Lkv), (1,1,Lq,Lkv), (Lq,Lkv). */
enum sdpa_plugin_mask_shape {
  SDPA_PLUGIN_MASK_B1QK = 0,
  SDPA_PLUGIN_MASK_BHQK = 1,
  SDPA_PLUGIN_MASK_11QK = 2,
  SDPA_PLUGIN_MASK_QK = 3
};

/* What the case runs on: logical (B,H,L,D) float buffers made by the worker, the mask's values as
 * (B,Lq,Lkv) with 0/1 for a bool mask (a mask of another shape is made from them:
 * core/inputs.hpp). */
typedef struct sdpa_plugin_case {
  int64_t b, hq, hkv, lq, lkv, d;
  int dtype;  /* sdpa_plugin_dtype */
  int mask;   /* sdpa_plugin_mask */
  int causal; /* sdpa_plugin_causal */
  int q_layout, k_layout, v_layout; /* sdpa_plugin_layout */
  int mask_dtype;  /* sdpa_plugin_dtype of an additive mask */
  int mask_shape;  /* sdpa_plugin_mask_shape */
  int mask_layout; /* sdpa_plugin_layout: contiguous, strided or offset */
  const float* q;
  const float* k;
  const float* v;
  const float* mask_values; /* NULL without a mask */
  int warmup;
  int repeat;
  int64_t budget_ms; /* 0: none */
  /* A backward case: after the checked forward, the plugin calls entering_backward(hook_ctx,
   * output, count) with its output (logical (B,Hq,Lq,D): count floats), then runs the backward
   * for grad_out (logical (B,Hq,Lq,D)); its timed runs are forward and backward together. */
  int backward;
  const float* grad_out;
  void (*entering_backward)(void* hook_ctx, const float* output, int64_t count);
  void* hook_ctx;
  /* dropout_p > 0: the checked run and a second one follow manual_seed(dropout_seed), a third
   * manual_seed(dropout_other_seed); the second and third fill same_seed_output and
   * other_seed_output. */
  double dropout_p;
  uint64_t dropout_seed;
  uint64_t dropout_other_seed;
  /* Every call of a case but a dropout one, the checked call (1) included, after it and
   * untimed: each_call(call_ctx, call, output, count, dq, dk, dv, kv_count) with its output
   * (count floats, logical (B,Hq,Lq,D)) and, for a backward case, its dq (count floats), dk and
   * dv (kv_count floats each; else NULL). The worker compares every later call with the first.
   * NULL: not called. */
  void (*each_call)(void* call_ctx, int call, const float* output, int64_t count,
                    const float* dq, const float* dk, const float* dv, int64_t kv_count);
  void* call_ctx;
} sdpa_plugin_case;

enum sdpa_plugin_outcome {
  SDPA_PLUGIN_RAN = 0,         /* output and times are filled */
  SDPA_PLUGIN_THREW = 1,       /* torch raised: reason is its message (the worker tells refusals) */
  SDPA_PLUGIN_UNSUPPORTED = 2, /* this torch cannot run the case at all: reason says why */
  SDPA_PLUGIN_FAILED = 3       /* it ran but gave nothing usable: reason says why */
};

/* Filled by run. The worker owns output (b*hq*lq*d floats), times_ms (`repeat` doubles), for a
 * dropout case same_seed_output and other_seed_output (b*hq*lq*d each) and, for a backward case, dq (b*hq*lq*d), dk and dv (b*hkv*lkv*d; logical order); the plugin owns the
 * texts. */
typedef struct sdpa_plugin_result {
  int outcome; /* sdpa_plugin_outcome */
  float* output;
  float* dq;
  float* dk;
  float* dv;
  float* same_seed_output;  /* dropout cases: b*hq*lq*d each */
  float* other_seed_output;
  double* times_ms;
  int times_len;
  char* reason;         /* NULL when it ran */
  char* backend_chosen; /* NULL when unknown */
  char* warnings;       /* torch's warnings during the case, one per line; NULL for none */
} sdpa_plugin_result;

typedef struct sdpa_torch_plugin {
  int version; /* SDPA_TORCH_PLUGIN_VERSION */
  /* One executor for (device, variant). `gpu_index` is N of cuda:N, -1 for the CPU; `flags` the
   * variant's flags, comma-separated ("ck", "aotriton"). NULL when torch failed at once. */
  void* (*open)(const char* device, int gpu_index, const char* variant_name, const char* backend,
                const char* flags);
  /* The hello: "key\tvalue" lines, keys "worker", "version.NAME", "fact.NAME", "unavailable". */
  char* (*hello)(void* self);
  void (*run)(void* self, const sdpa_plugin_case* c, sdpa_plugin_result* result);
  /* "ok" or "failed: why", after each case (a deferred device error shows here). */
  char* (*canary)(void* self);
  void (*free_text)(char* text);
  void (*close)(void* self);
} sdpa_torch_plugin;

typedef const sdpa_torch_plugin* (*sdpa_torch_plugin_entry)(void);

#ifdef __cplusplus
}
#endif

#endif
