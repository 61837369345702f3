/* The host side of the stage ABI: the ebb_host_api table every stage gets and
 * the context behind an ebb_stage_ctx pointer. One pl_sctx per loaded stage
 * instance; the runner creates it with the instance's owner and keeps it until
 * the instance is released.
 *
 * What a context gives a stage: the device; an owner of its own in the
 * device allocator (all device memory and pinned buffers a stage takes are
 * that owner's, so the runner can account, leak-check and free them); the
 * release registry (callbacks are tracked so they are removed when the stage
 * goes); a logger scoped to the instance name; cancellation (the job's flag)
 * and a deadline (timeout_s). */
#ifndef EBB_PIPELINE_HOST_H
#define EBB_PIPELINE_HOST_H

#include <stdatomic.h>

#include "base/clock.h" /* base_now, for the deadlines */
#include "pipeline/stage_api.h"

typedef struct pl_sctx pl_sctx;

/* Called when an allocation ran out of device memory; answers 1 if it freed
 * something (idle stages evicted) so the allocation is worth retrying. */
typedef int (*pl_sctx_oom_fn)(void *arg, pl_sctx *who);

typedef struct pl_sctx_mod {
  const void *image;
  dev_module *module;
} pl_sctx_mod;

struct pl_sctx {
  ebb_stage_ctx pub; /* first: what the stage sees (pub.host) */
  dev_device *dev;   /* borrowed */
  mem_allocator *alloc;
  ebb_owner *owner; /* borrowed: the runner creates and destroys it */
  char name[128];   /* instance name (log scope) */
  const char *output_dir;
  /* Where the isolated proxy makes a worker's private load directory
   * (isolated.h); NULL: $TMPDIR, else /tmp. Borrowed from the runner. */
  const char *scratch_dir;

  const atomic_int *cancel; /* the job's flag (nonzero: cancelled), may be NULL */
  double deadline;          /* CLOCK_MONOTONIC seconds; 0: none */
  atomic_int timed_out;     /* set when cancelled() saw the deadline pass */
  double progress;

  int err_code; /* last set_error of the stage */
  char err_msg[1024];

  uint64_t *handles; /* release-registry handles it registered */
  size_t nhandles, caphandles;
  dev_dseg *raw; /* raw_driver_alloc segments still held */
  size_t nraw, capraw;
  uint64_t raw_bytes; /* held now */
  uint64_t raw_freed; /* given back (by the stage or ebb), all time */
  pl_sctx_mod *mods;
  size_t nmods;

  struct pl_hblock *host_blocks;              /* host_alloc's live blocks (a list) */
  uint64_t host_bytes, host_peak, host_total; /* pageable host bytes: now, peak, all time */
  uint32_t host_nblocks;

  pl_sctx_oom_fn on_oom;
  void *on_oom_arg;

  /* Appended to the release line in parentheses when set (the isolated
   * proxy: "worker exited: killed by SIGKILL"); cleared by the release. */
  char release_note[160];
};

/* The one host table (static storage). */
const ebb_host_api *pl_host_table(void);
static inline pl_sctx *pl_sctx_of(ebb_stage_ctx *c) { return (pl_sctx *)c; }

/* Fills c for a stage instance; name is copied, the rest borrowed. */
void pl_sctx_init(pl_sctx *c, dev_device *dev, ebb_owner *owner, const char *name,
                  const char *output_dir);
/* Drops what the stage left registered or held outside the allocator:
 * removes its release callbacks, frees raw driver segments (counted in
 * raw_freed), unloads kernel modules, frees the context's own storage. The
 * owner is not touched. */
void pl_sctx_cleanup(pl_sctx *c);
/* Frees the host_alloc blocks the stage did not free and answers their
 * bytes (*blocks: how many); quiet: no log line, else "[name] leaked N MiB
 * of host memory in M blocks; freed by ebb" and the largest sites. */
uint64_t pl_sctx_host_reclaim(pl_sctx *c, int quiet, uint32_t *blocks);
/* Peak host bytes of the stage: pageable (host_alloc) + its owner's pinned peak. */
uint64_t pl_sctx_host_peak(pl_sctx *c);
/* Clears the error set by the stage. */
void pl_sctx_clear_error(pl_sctx *c);
/* The driver's free memory on dev (never initialises a context); 0 when it
 * cannot say, and then *known (may be NULL) is 0. */
uint64_t pl_driver_free(dev_device *dev, int *known);

#endif
