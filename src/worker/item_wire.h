/* The worker protocol's item codec (docs/worker-protocol.md, "Items"): the
 * one place that turns an item into its JSON description and back, with the
 * range checks. Both ends use it: the host for a worker's results
 * (src/pipeline/isolated.c) and ebb-worker for its inputs
 * (src/cli/worker_main.c), through pl_item_to_wire / pl_item_from_wire
 * (src/pipeline/items.h), which add the item collections of the pipeline
 * room. This room knows nothing of those collections. */
#ifndef EBB_WORKER_ITEM_WIRE_H
#define EBB_WORKER_ITEM_WIRE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ebb/stage.h"

/* Largest payload either side accepts: 2^40 float32 elements. */
#define EBB_WIRE_ITEM_MAX_ELEMS (1ull << 40)
#define EBB_WIRE_ITEM_MAX_CHANNELS 64u
#define EBB_WIRE_ITEM_MAX_RATE 10000000u
#define EBB_WIRE_ITEM_MAX_DIMS 8u

/* One item as it crosses the wire. Strings are borrowed: from the JSON
 * object it was decoded from, or from the caller's item when encoding. */
typedef struct wrk_wire_item {
  size_t index; /* 0-based position in its message, for errors */
  ebb_item_kind kind;
  const char *name;
  const char *text; /* JSON: the document; FILE: the path */
  /* AUDIO */
  uint64_t frames;
  uint32_t channels, rate;
  /* TENSOR */
  uint32_t ndim;
  uint64_t shape[EBB_WIRE_ITEM_MAX_DIMS];
  /* AUDIO and TENSOR: the payload, elements x 4 bytes, in /dev/shm/shm */
  const char *shm; /* NULL: no payload (0 bytes) */
  size_t bytes;
  const float *data; /* after wrk_wire_item_map; NULL when bytes is 0 */
} wrk_wire_item;

/* Decodes and checks the item object o into *it (strings borrowed from o):
 * kind audio|tensor|json|file; a non-empty name; json has a string text,
 * file a string path; audio frames >= 0 (at most 2^40 samples), channels
 * 1..64, rate 1..10000000; tensor a shape of at most 8 non-negative sizes
 * (at most 2^40 elements); "bytes", when given, equal to elements x 4; a
 * payload's "shm" a valid name that starts with shm_prefix (NULL: any
 * valid name). Returns 0, or EBB_EPROTO with a message
 * "item #N ('NAME') ..." that says what was wrong. */
int wrk_wire_item_decode(const json_t *o, size_t index, const char *shm_prefix, wrk_wire_item *it);

/* Maps a decoded item's payload read-only into it->data (nothing when bytes
 * is 0). EBB_EPROTO "item #N 'NAME': ..." when the file is missing or
 * short. Undo with wrk_wire_item_unmap (safe on an unmapped item). */
int wrk_wire_item_map(wrk_wire_item *it);
void wrk_wire_item_unmap(wrk_wire_item *it);

/* A new JSON object describing it (name, kind and the kind's members; not
 * shm/bytes, which the sender adds once it has stored the payload: see
 * wrk_wire_item_set_payload). NULL when out of host memory. */
json_t *wrk_wire_item_encode(const wrk_wire_item *it);
/* Adds the payload reference ("shm", "bytes") to an encoded item. */
int wrk_wire_item_set_payload(json_t *o, const char *shm, size_t bytes);

/* Elements of a tensor with this shape (1 for ndim 0); UINT64_MAX on
 * overflow or ndim > 8. */
uint64_t wrk_wire_tensor_elems(uint32_t ndim, const uint64_t *shape);

#endif
