/* A test plugin for server_deadline_export (tests/lib/deadline.sh): stage
 * "stems" adds the AUDIO items "vocals" and "accompaniment" (two tones) of
 * `seconds` at `rate` Hz, quickly, so that export's stems have a 5-minute
 * input at a high rate to write and export is what runs at the deadline
 * (separate would take longer than the deadline to make them). It polls its
 * cancellation too: on a loaded machine the deadline may fall in it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/stage.h"

typedef struct stems {
  double seconds;
  unsigned rate;
} stems;

static int load(ebb_stage_ctx *ctx, const char *o, void **s) {
  stems *st = calloc(1, sizeof *st);
  if (!st)
    return ebb_set_error(ctx, EBB_ENOMEM, "stems: out of memory");
  st->seconds = 300;
  st->rate = 192000;
  const char *p = o ? strstr(o, "\"rate\":") : NULL;
  if (p)
    st->rate = (unsigned)atoi(p + 7);
  p = o ? strstr(o, "\"seconds\":") : NULL;
  if (p)
    st->seconds = atof(p + 10);
  *s = st;
  return 0;
}

static int run(ebb_stage_ctx *ctx, void *s, const ebb_items *in, ebb_items *out) {
  (void)in;
  stems *st = s;
  uint64_t n = (uint64_t)(st->seconds * st->rate);
  float *x = malloc(sizeof(float) * (n ? n : 1));
  if (!x)
    return ebb_set_error(ctx, EBB_ENOMEM, "stems: out of memory");
  const char *names[] = {"vocals", "accompaniment"};
  int rc = 0;
  float period[4800]; /* one period of a 1/4800-of-the-rate tone, copied along */
  for (int k = 0; k < 2 && rc == 0; k++) {
    for (int i = 0; i < 4800; i++)
      period[i] = (float)(0.25 * sin(2.0 * M_PI * (k + 1) * i / 4800.0));
    for (uint64_t i = 0; i < n; i += 4800) {
      if (i % (4800 * 256) == 0 && ebb_cancelled(ctx)) {
        free(x);
        return ebb_set_error(ctx, EBB_ECANCELED, "stems: cancelled");
      }
      memcpy(x + i, period, sizeof(float) * (size_t)(n - i < 4800 ? n - i : 4800));
    }
    rc = ctx->host->add_audio(out, names[k], x, n, 1, st->rate);
  }
  free(x);
  return rc;
}

static void unload(ebb_stage_ctx *ctx, void *s) {
  (void)ctx;
  free(s);
}

static const ebb_stage stage = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "stems",
    .version = 1,
    .description = "test plugin: two tones as vocals and accompaniment",
    .options_schema = "{\"rate\": {\"type\": \"integer\", \"default\": 192000}, "
                      "\"seconds\": {\"type\": \"number\", \"default\": 300}}",
    .load = load,
    .run = run,
    .unload = unload,
};
static const ebb_stage *const stages[] = {&stage};

__attribute__((visibility("default"))) int ebb_plugin_init(const ebb_host_api *h,
                                                           const ebb_stage *const **o, size_t *n) {
  if (h->abi_version != EBB_STAGE_ABI_VERSION)
    return EBB_EABI;
  *o = stages;
  *n = 1;
  return 0;
}
