/* An example plugin stage: "checksum". It streams the job's input file through
 * device memory (copy to the device in chunks, read back, checksum what came
 * back) and outputs a JSON item "checksum" with the file's size and FNV-1a
 * hash. It shows every part of the stage ABI a plugin needs: the init
 * symbol, the vtable, options, device memory from the stage's owner, a
 * pinned buffer, a cache dropped by the release registry, cancellation, items.
 *
 * Build (no ebb library to link: everything goes through ctx->host):
 *   gcc -shared -fPIC -O2 -I include -o checksum.so examples/stages/checksum.c
 * Use: put checksum.so in a directory named in the config's "plugin_dirs" (or
 * in EBB_PLUGIN_PATH), see examples/configs/checksum.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/stage.h"

typedef struct state {
  size_t chunk;       /* bytes per device buffer */
  uint64_t dbuf;      /* device buffer, kept between runs: a cache */
  uint64_t handle;    /* its release-registry callback */
  ebb_stage_ctx *ctx; /* for the callback */
} state;

static const ebb_host_api *host; /* kept by ebb_plugin_init */

static void drop_buffer(void *arg) {
  state *s = arg;
  if (s->dbuf) {
    ebb_dev_free(s->ctx, s->dbuf);
    s->dbuf = 0;
  }
}

static int load(ebb_stage_ctx *ctx, const char *options_json, void **out) {
  /* options_json is validated and has the defaults filled in, e.g.
   * {"chunk_kib": 1024}; a plugin may use any JSON parser. */
  long kib = 1024;
  const char *p = strstr(options_json, "\"chunk_kib\"");
  if (p && (p = strchr(p, ':')))
    kib = strtol(p + 1, NULL, 10);
  if (kib <= 0 || kib > 1024 * 1024)
    return ebb_set_error(ctx, EBB_EINVAL, "checksum: chunk_kib must be between 1 and 1048576");
  state *s = calloc(1, sizeof *s);
  if (!s)
    return ebb_set_error(ctx, EBB_ENOMEM, "checksum: out of host memory");
  s->chunk = (size_t)kib << 10;
  s->ctx = ctx;
  *out = s;
  return 0;
}

static int run(ebb_stage_ctx *ctx, void *st, const ebb_items *in, ebb_items *out) {
  state *s = st;
  ebb_item_info input = {.size = sizeof input};
  if (ctx->host->item_find(in, "input", &input) != 0 || input.kind != EBB_ITEM_FILE)
    return ebb_set_error(ctx, EBB_EINPUT, "checksum: the job has no input file");
  FILE *f = fopen(input.text, "rb");
  if (!f)
    return ebb_set_error(ctx, EBB_EINPUT, "checksum: cannot open the input file");
  int rc = 0;
  if (!s->dbuf) { /* the device buffer is a cache: built once, dropped on release */
    if ((rc = ebb_dev_alloc(ctx, s->chunk, &s->dbuf)) != 0) {
      fclose(f);
      s->dbuf = 0;
      return ebb_set_error(ctx, rc, "checksum: no device memory for the buffer");
    }
    if (!s->handle)
      ctx->host->on_release(ctx, "checksum buffer", drop_buffer, s, &s->handle);
  }
  void *pin = NULL;
  if ((rc = ctx->host->pinned_alloc(ctx, 2 * s->chunk, &pin)) != 0) {
    fclose(f);
    return ebb_set_error(ctx, rc, "checksum: no pinned host memory");
  }
  unsigned char *hbuf = pin, *back = hbuf + s->chunk;
  uint64_t hash = 14695981039346656037ull, total = 0; /* FNV-1a 64 offset basis */
  size_t n;
  while ((n = fread(hbuf, 1, s->chunk, f)) > 0) {
    if (ebb_cancelled(ctx)) {
      rc = ebb_set_error(ctx, EBB_ECANCELED, "checksum: cancelled");
      break;
    }
    if ((rc = ctx->host->copy_htod(ctx, s->dbuf, hbuf, n)) ||
        (rc = ctx->host->copy_dtoh(ctx, back, s->dbuf, n))) {
      rc = ebb_set_error(ctx, rc, "checksum: device copy failed");
      break;
    }
    for (size_t i = 0; i < n; i++)
      hash = (hash ^ back[i]) * 1099511628211ull;
    total += n;
  }
  fclose(f);
  ctx->host->pinned_free(ctx, pin);
  if (rc)
    return rc;
  char json[160];
  snprintf(json, sizeof json, "{\"bytes\": %llu, \"fnv1a64\": \"%016llx\"}",
           (unsigned long long)total, (unsigned long long)hash);
  char msg[200];
  snprintf(msg, sizeof msg, "%llu bytes, fnv1a64 %016llx", (unsigned long long)total,
           (unsigned long long)hash);
  ebb_stage_log(ctx, 1, msg);
  return ctx->host->add_json(out, "checksum", json);
}

static void unload(ebb_stage_ctx *ctx, void *st) {
  state *s = st;
  if (s->handle)
    ctx->host->off_release(ctx, s->handle);
  drop_buffer(s);
  free(s);
}

static const ebb_stage checksum_stage = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "checksum",
    .version = 1,
    .description = "example plugin: streams the input file through device memory and "
                   "outputs its FNV-1a hash",
    /* bounded, so a job may set it ("trust": "job"; docs/stage-abi.md) */
    .options_schema = "{\"chunk_kib\": {\"type\": \"integer\", \"default\": 1024, "
                      "\"minimum\": 1, \"maximum\": 1048576, \"trust\": \"job\", "
                      "\"description\": \"device buffer size in KiB\"}}",
    .needs_gpu = 1,
    .load = load,
    .run = run,
    .unload = unload,
    .release = NULL,
};

static const ebb_stage *const stages[] = {&checksum_stage};

/* The one exported symbol. */
__attribute__((visibility("default"))) int ebb_plugin_init(const ebb_host_api *h,
                                                           const ebb_stage *const **out,
                                                           size_t *n) {
  if (!h || h->abi_version != EBB_STAGE_ABI_VERSION)
    return EBB_EABI;
  host = h;
  *out = stages;
  *n = sizeof stages / sizeof stages[0];
  return 0;
}
