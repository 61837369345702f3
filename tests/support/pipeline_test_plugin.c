/* Broken plugins for the pipeline room's plugin-loading tests, one source
 * built several ways (tests/unit/pipeline.cmake):
 *   PLUGIN_BAD_ABI    a stage that says it speaks stage ABI version 99
 *   PLUGIN_NO_INIT    no ebb_plugin_init symbol at all
 *   PLUGIN_INIT_FAILS ebb_plugin_init answers EBB_EABI (as a plugin built
 *                     for another host ABI does)
 *   PLUGIN_NO_RUN     a stage without a run entry point
 *   PLUGIN_OLD_SIZE   a good stage built against the first, shorter
 *                     ebb_stage (no estimate): it must still load
 *   (none)            a good plugin with one stage, "echo", that says in a
 *                     JSON item the input's kind and its output directory,
 *                     and appends the output directory it sees at unload
 *                     to $EBB_TEST_ECHO_UNLOAD_LOG when that is set; with
 *                     $EBB_TEST_ECHO_DEAF_S set its run first sleeps that
 *                     many seconds without ever polling its cancellation
 *                     (the stage a shutdown grace is for) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ebb/stage.h"

static int load(ebb_stage_ctx *ctx, const char *o, void **s) {
  *s = NULL;
  return 0;
}
__attribute__((unused)) static int run(ebb_stage_ctx *ctx, void *s, const ebb_items *in,
                                       ebb_items *out) {
  const char *deaf = getenv("EBB_TEST_ECHO_DEAF_S");
  if (deaf) {
    struct timespec ts = {atoi(deaf), 0};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  ebb_item_info it = {.size = sizeof it};
  if (ctx->host->item_find(in, "input", &it))
    return ebb_set_error(ctx, EBB_EINPUT, "echo: no input");
  char json[1024]; /* the output directory this run was given (test paths need no escaping) */
  const char *dir = ctx->host->output_dir ? ctx->host->output_dir(ctx) : NULL;
  snprintf(json, sizeof json, "{\"input_kind\": %d, \"output_dir\": \"%s\"}", (int)it.kind,
           dir ? dir : "");
  return ctx->host->add_json(out, "echo", json);
}
static void unload(ebb_stage_ctx *ctx, void *s) {
  const char *log = getenv("EBB_TEST_ECHO_UNLOAD_LOG");
  FILE *f = log ? fopen(log, "a") : NULL;
  if (f) {
    const char *dir = ctx->host->output_dir ? ctx->host->output_dir(ctx) : NULL;
    fprintf(f, "%s\n", dir ? dir : "");
    fclose(f);
  }
}

static const ebb_stage stage = {
#ifdef PLUGIN_BAD_ABI
    .abi_version = 99,
#else
    .abi_version = EBB_STAGE_ABI_VERSION,
#endif
#ifdef PLUGIN_OLD_SIZE
    .size = EBB_STAGE_SIZE_V1,
#else
    .size = sizeof(ebb_stage),
#endif
    .name = "echo",
    .version = 1,
    .description = "test plugin",
    .options_schema = "{}",
    .load = load,
#ifndef PLUGIN_NO_RUN
    .run = run,
#endif
    .unload = unload,
};
__attribute__((unused)) static const ebb_stage *const stages[] = {&stage};

#ifndef PLUGIN_NO_INIT
__attribute__((visibility("default"))) int
ebb_plugin_init(const ebb_host_api *h, const ebb_stage *const **out, size_t *n) {
#ifdef PLUGIN_INIT_FAILS
  return EBB_EABI;
#endif
  if (h->abi_version != EBB_STAGE_ABI_VERSION)
    return EBB_EABI;
  *out = stages;
  *n = 1;
  return 0;
}
#else
__attribute__((visibility("default"))) int not_an_ebb_plugin(void) { return stage.version; }
#endif
