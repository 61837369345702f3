/* Typed items between stages (struct ebb_items of include/ebb/stage.h).
 *
 * Ownership: an ebb_items collection owns every item in it; add_* copy what
 * they are given (samples, tensor data, text, path). The job's collection
 * lives as long as the job; a stage's output collection is merged into the
 * job's (pl_items_take) when the stage succeeds, so an item that outlives its
 * stage is owned by the job, never by the stage that made it.
 *
 * Device tensors: the ABI's add_tensor takes host data only. Inside ebb,
 * pl_items_add_device_tensor copies a device tensor into a block owned by
 * the job's owner (device to device), so the stage's owner can be torn down
 * without touching the item; the block is freed when the collection is. */
#ifndef EBB_PIPELINE_ITEMS_H
#define EBB_PIPELINE_ITEMS_H

#include <jansson.h>

#include "pipeline/stage_api.h"

typedef struct pl_item_rec {
  ebb_item_kind kind;
  char *name;
  /* AUDIO */
  float *samples;
  uint64_t frames;
  uint32_t channels, rate;
  /* TENSOR: data (host) or dptr (device, a block of the job's owner) */
  float *data;
  uint64_t dptr;
  uint32_t ndim;
  uint64_t shape[8];
  /* JSON text / FILE path */
  char *text;
  /* AUDIO/TENSOR whose payload is a shared-memory mapping, not a heap
   * block (the worker protocol's files): samples/data point into it and
   * map_bytes is its length (0: a heap block). shm: the file's name when
   * the item owns the file (unlinked with the item; it can be handed to a
   * worker by name, with no copy); NULL when it only maps a peer's. */
  size_t map_bytes;
  char *shm;
} pl_item_rec;

/* job_owner: owner for device tensors (may be NULL: no device tensors).
 * parent: another collection whose names must not be reused (the job's
 * items, for a stage's output), borrowed; may be NULL. */
int pl_items_create(ebb_owner *job_owner, const ebb_items *parent, ebb_items **out);
/* Frees every item (device tensors back to the allocator). NULL: no-op. */
void pl_items_destroy(ebb_items *items);

int pl_items_count(const ebb_items *items);
/* The stored record (borrowed, valid until the collection changes). */
const pl_item_rec *pl_items_rec(const ebb_items *items, int i);
/* The ABI view of item i / of the item named name (EBB_ENOTFOUND). */
int pl_items_get(const ebb_items *items, int i, ebb_item_info *out);
int pl_items_find(const ebb_items *items, const char *name, ebb_item_info *out);

/* Copying adders (the host table's add_*). Names must be non-empty and
 * unique in the collection and its parent (EBB_EINVAL names the item). */
int pl_items_add_audio(ebb_items *out, const char *name, const float *samples, uint64_t frames,
                       uint32_t channels, uint32_t rate);
int pl_items_add_tensor(ebb_items *out, const char *name, const float *data, uint32_t ndim,
                        const uint64_t *shape);
int pl_items_add_json(ebb_items *out, const char *name, const char *json);
int pl_items_add_file(ebb_items *out, const char *name, const char *path);
/* Copies the device tensor at src (on dev) into a block of the collection's
 * job owner. */
int pl_items_add_device_tensor(ebb_items *out, dev_device *dev, const char *name, uint64_t src,
                               uint32_t ndim, const uint64_t *shape);
/* Moves every item of src to the end of dst (src is left empty). Fails
 * without moving anything if a name is already in dst. */
int pl_items_take(ebb_items *dst, ebb_items *src);

/* An item's description without its payload, as the worker protocol's one
 * item codec writes it: name, kind and metadata (audio: frames, channels,
 * rate; tensor: shape; json: text; file: path). A new object (caller
 * json_decref), NULL when out of memory. */
json_t *pl_item_describe(const pl_item_rec *it);
/* The worker protocol's description of an item (docs/worker-protocol.md),
 * through the protocol's one item codec (src/worker/item_wire.h): a new
 * JSON object with name, kind and metadata (audio: frames, channels, rate;
 * tensor: shape; json: text; file: path) appended to arr. An audio or tensor
 * payload of n bytes goes through put(arg, shm, n, obj, &dst), which adds
 * its reference to obj: for an item that owns a shared-memory file (shm
 * non-NULL) it hands that file over by name and nothing is copied; else it
 * makes a new file, mapped read-write into *dst, which the codec fills once
 * (host bytes copied; a device tensor copied from the device straight into
 * it) and unmaps. pl_item_put_shm is such a put. */
typedef int (*pl_item_put_fn)(void *arg, const char *shm, size_t n, json_t *obj, void **dst);
int pl_item_to_wire(const pl_item_rec *it, dev_device *dev, pl_item_put_fn put, void *arg,
                    json_t *arr);
/* The put of both ends, for the file /dev/shm/NAME (the sender's prefix
 * and a sequence): a hard link to shm when given, else a new file of n
 * bytes (*dst mapped; NULL for n 0); adds "shm": name, "bytes": n to obj. */
int pl_item_put_shm(const char *name, const char *shm, size_t n, json_t *obj, void **dst);
/* The other way: decodes and range-checks the item object o (the index-th
 * of its message; wrk_wire_item_decode) and adds it to out without copying
 * its payload. A payload must be named with shm_prefix (NULL: any valid
 * name). take 1 (the host, for a worker's results): the item takes the file
 * over (renamed into ebb's own names, "ebb-h<pid>-<n>", mapped, unlinked
 * with the item), so it can go on to the next worker by name; take 0 (a
 * worker, for its inputs): the item maps the sender's file read-only and
 * leaves it to the sender. EBB_EPROTO "item #N ..." for a bad item. */
int pl_item_from_wire(ebb_items *out, const json_t *o, size_t index, const char *shm_prefix,
                      int take);

/* Elements of a tensor with this shape (1 for ndim 0); UINT64_MAX on
 * overflow or ndim > 8. */
uint64_t pl_tensor_elems(uint32_t ndim, const uint64_t *shape);

#endif
