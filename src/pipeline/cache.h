/* The stage result cache on disk.
 *
 * Key: SHA-256 over "ebb-stage-cache-v1", the stage's registry name, its
 * version, its options (canonical JSON: sorted keys, compact, defaults
 * filled in) and, for every input item in order, its kind, its name and the
 * SHA-256 of its content (a FILE item's file bytes, not its path). A stage
 * whose outputs change must bump ebb_stage.version.
 *
 * Entry: DIR/<64 hex digits>.ebbc, written to a temporary file and renamed,
 * in this self-describing format (integers little-endian):
 *   "EBBCACHE" u32 format(=1) u32 nitems
 *   per item: u32 kind, u32 namelen, name bytes, then by kind
 *     AUDIO  u64 frames, u32 channels, u32 rate, f32 samples[frames*channels]
 *     TENSOR u32 ndim, u64 shape[ndim], f32 data[prod(shape)]
 *     JSON   u64 len, text bytes
 *     FILE   u32 baselen, basename bytes, u64 len, content bytes
 *   then the SHA-256 of every byte before it.
 * A short, truncated, mistagged or checksum-failing entry is "corrupt": it
 * is deleted and the stage is recomputed. FILE items are restored into the
 * job's output directory under their basename. Device tensors are stored
 * from host copies and come back as host tensors. */
#ifndef EBB_PIPELINE_CACHE_H
#define EBB_PIPELINE_CACHE_H

#include <jansson.h>
#include <stdint.h>

#include "pipeline/items.h"

/* The default directory: $XDG_CACHE_HOME/ebb, else $HOME/.cache/ebb. Writes
 * into buf; NULL if neither variable is set. */
const char *pl_cache_default_dir(char *buf, size_t n);

int pl_cache_key(const ebb_stage *st, const json_t *options, const ebb_items *in, uint8_t key[32]);

/* Looks the key up. *hit = 1: the entry's items were added to out. *hit = 0
 * with *corrupt = 1: the entry existed but failed its checks and was
 * removed (message in ebb_errmsg()). */
int pl_cache_load(const char *dir, const uint8_t key[32], ebb_items *out, const char *output_dir,
                  int *hit, int *corrupt);
/* Stores items (dev: to read device tensors back; may be NULL if none).
 * Creates dir (and parents) as needed. */
int pl_cache_store(const char *dir, const uint8_t key[32], const ebb_items *items, dev_device *dev);

#endif
