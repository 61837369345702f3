/* Small helpers shared by the built-in stages: printf-style stage errors,
 * finding an AUDIO item as mono, host buffers and cancellation. (Options are
 * read against each stage's schema: stages/options.c.) */
#ifndef EBB_STAGES_AUDIO_ST_UTIL_H
#define EBB_STAGES_AUDIO_ST_UTIL_H

#include <jansson.h>
#include <stdint.h>

#include "ebb/error.h" /* built-in stages run inside ebb: ebb_seterr, ebb_errmsg */
#include "ebb/stage.h"

/* ebb_set_error with a formatted message; returns code. */
int stg_st_fail(ebb_stage_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Logs a formatted line at level (0 debug .. 3 error). */
void stg_st_log(ebb_stage_ctx *ctx, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The first of `names` (NULL-terminated) present as an AUDIO item, mixed down
 * to mono: *mono is malloc'd (caller frees), *used is the name found. Returns
 * EBB_ENOTFOUND (with no error set) when none is present. */
int stg_st_find_mono(ebb_stage_ctx *ctx, const ebb_items *in, const char *const *names,
                     float **mono, uint64_t *frames, uint32_t *rate, const char **used);

/* Host working buffers counted for the running stage (issue 17): between
 * stg_st_host_begin(ctx) and stg_st_host_end() on this thread (separate's and
 * pitch's run), stg_st_malloc/stg_st_calloc take pageable host memory
 * through the stage's host_alloc (its owner's peak, leaks); outside, or
 * from another thread, plain malloc/calloc. stg_st_free frees either kind
 * (a pointer that is not the stage's goes to free()). */
void stg_st_host_begin(ebb_stage_ctx *ctx);
void stg_st_host_end(void);
ebb_stage_ctx *stg_st_host_ctx(void);
#define stg_st_malloc(n) ebb_host_alloc_at_(stg_st_host_ctx(), (n), 0, EBB_SITE)
#define stg_st_calloc(k, n) ebb_host_alloc_at_(stg_st_host_ctx(), (size_t)(k) * (n), 1, EBB_SITE)
void stg_st_free(void *p);

/* Cancellation below a stage's run, in code that has no ctx (the DSP of
 * pitch, separate, align, decode): between stg_st_watch(ctx) and
 * stg_st_unwatch() on this thread, stg_st_stop() answers 1 once the job was
 * cancelled or ran past its deadline (ebb_cancelled), and keeps answering 1
 * (sticky) so that a loop can break out and its caller, after it, return
 * EBB_ECANCELED. Loops call it about every 10 ms of their work (a frame, a
 * block); outside a watch it answers 0 (songgen, the unit tests). */
void stg_st_watch(ebb_stage_ctx *ctx);
void stg_st_unwatch(void);
int stg_st_stop(void);
/* EBB_ECANCELED with the stage's error "cancelled during WHAT" when
 * stg_st_stop() said so, else 0. */
int stg_st_stopped(ebb_stage_ctx *ctx, const char *what);

/* The whitespace-separated words of the text file at path, for a work
 * estimate (the stage ABI's `work`): opened non-blocking, a regular file of
 * at most max_bytes, else 0 words (the stage's run says what is wrong). */
uint64_t stg_st_file_words(const char *path, uint64_t max_bytes);

#endif
