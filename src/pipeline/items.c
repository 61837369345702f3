/* Typed items between stages (items.h): the collections, what each add
 * copies, and how a stage's outputs pass to the job. */
#include "pipeline/items.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/item_wire.h"
#include "worker/wire.h"

struct ebb_items {
  pl_item_rec *v;
  int n, cap;
  ebb_owner *owner;
  const ebb_items *parent;
};

int pl_items_create(ebb_owner *job_owner, const ebb_items *parent, ebb_items **out) {
  ebb_items *it = calloc(1, sizeof *it);
  if (!it)
    return ebb_seterr(EBB_ENOMEM, "items: out of host memory");
  it->owner = job_owner;
  it->parent = parent;
  *out = it;
  return 0;
}

static void rec_free(ebb_items *items, pl_item_rec *r) {
  free(r->name);
  if (r->map_bytes) { /* a shared-memory payload: unmapped, and unlinked if ours */
    wrk_shm_unmap(r->kind == EBB_ITEM_AUDIO ? (void *)r->samples : (void *)r->data, r->map_bytes);
    if (r->shm)
      wrk_shm_unlink(r->shm);
  } else {
    free(r->samples);
    free(r->data);
  }
  free(r->shm);
  free(r->text);
  if (r->dptr && items->owner)
    mem_free(mem_owner_allocator(items->owner), r->dptr);
  memset(r, 0, sizeof *r);
}

void pl_items_destroy(ebb_items *items) {
  if (!items)
    return;
  for (int i = 0; i < items->n; i++)
    rec_free(items, &items->v[i]);
  free(items->v);
  free(items);
}

int pl_items_count(const ebb_items *items) { return items ? items->n : 0; }

const pl_item_rec *pl_items_rec(const ebb_items *items, int i) {
  return items && i >= 0 && i < items->n ? &items->v[i] : NULL;
}

static void to_info(const pl_item_rec *r, ebb_item_info *o) {
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->kind = r->kind;
  o->name = r->name;
  o->samples = r->samples;
  o->frames = r->frames;
  o->channels = r->channels;
  o->rate = r->rate;
  o->data = r->data;
  o->dptr = r->dptr;
  o->ndim = r->ndim;
  memcpy(o->shape, r->shape, sizeof o->shape);
  o->text = r->text;
}

int pl_items_get(const ebb_items *items, int i, ebb_item_info *out) {
  const pl_item_rec *r = pl_items_rec(items, i);
  if (!r || !out)
    return ebb_seterr(EBB_ENOTFOUND, "item %d: no such item (the job has %d)", i,
                      pl_items_count(items));
  to_info(r, out);
  return 0;
}

static const pl_item_rec *find(const ebb_items *items, const char *name) {
  for (const ebb_items *c = items; c; c = c->parent)
    for (int i = 0; i < c->n; i++)
      if (!strcmp(c->v[i].name, name))
        return &c->v[i];
  return NULL;
}

int pl_items_find(const ebb_items *items, const char *name, ebb_item_info *out) {
  const pl_item_rec *r = name && items ? find(items, name) : NULL;
  if (!r || !out)
    return ebb_seterr(EBB_ENOTFOUND, "item '%s': no such item", name ? name : "(null)");
  to_info(r, out);
  return 0;
}

/* Reserves a slot for an item called name; the caller fills the payload. */
static int add_rec(ebb_items *items, const char *name, ebb_item_kind kind, pl_item_rec **out) {
  if (!items || !name || !*name)
    return ebb_seterr(EBB_EINVAL, "item: a name is required");
  if (find(items, name))
    return ebb_seterr(EBB_EINVAL, "item '%s': the job already has an item of that name", name);
  if (items->n == items->cap) {
    int cap = items->cap ? items->cap * 2 : 8;
    pl_item_rec *v = realloc(items->v, (size_t)cap * sizeof *v);
    if (!v)
      return ebb_seterr(EBB_ENOMEM, "item '%s': out of host memory", name);
    items->v = v;
    items->cap = cap;
  }
  pl_item_rec *r = &items->v[items->n];
  memset(r, 0, sizeof *r);
  r->name = strdup(name);
  if (!r->name)
    return ebb_seterr(EBB_ENOMEM, "item '%s': out of host memory", name);
  r->kind = kind;
  *out = r;
  return 0;
}

/* Drops the slot add_rec reserved (payload failed). */
static int drop_last(ebb_items *items, int rc) {
  rec_free(items, &items->v[items->n]);
  return rc;
}

int pl_items_add_audio(ebb_items *out, const char *name, const float *samples, uint64_t frames,
                       uint32_t channels, uint32_t rate) {
  pl_item_rec *r;
  int rc = add_rec(out, name, EBB_ITEM_AUDIO, &r);
  if (rc)
    return rc;
  if (channels == 0 || rate == 0 || (frames && !samples) || frames > (UINT64_MAX / 4) / channels)
    return drop_last(out, ebb_seterr(EBB_EINVAL,
                                     "item '%s': bad audio (frames %llu, channels "
                                     "%u, rate %u)",
                                     name, (unsigned long long)frames, channels, rate));
  size_t n = (size_t)(frames * channels);
  r->samples = malloc(n ? n * sizeof(float) : 1);
  if (!r->samples)
    return drop_last(out, ebb_seterr(EBB_ENOMEM, "item '%s': out of host memory", name));
  if (n)
    memcpy(r->samples, samples, n * sizeof(float));
  r->frames = frames;
  r->channels = channels;
  r->rate = rate;
  out->n++;
  return 0;
}

uint64_t pl_tensor_elems(uint32_t ndim, const uint64_t *shape) {
  return wrk_wire_tensor_elems(ndim, shape);
}

int pl_items_add_tensor(ebb_items *out, const char *name, const float *data, uint32_t ndim,
                        const uint64_t *shape) {
  pl_item_rec *r;
  int rc = add_rec(out, name, EBB_ITEM_TENSOR, &r);
  if (rc)
    return rc;
  uint64_t n = pl_tensor_elems(ndim, shape);
  if (ndim > 8 || (ndim && !shape) || n == UINT64_MAX || (n && !data))
    return drop_last(out, ebb_seterr(EBB_EINVAL, "item '%s': bad tensor (ndim %u, at most 8)", name,
                                     ndim));
  r->data = malloc(n ? (size_t)n * sizeof(float) : 1);
  if (!r->data)
    return drop_last(out, ebb_seterr(EBB_ENOMEM, "item '%s': out of host memory", name));
  if (n)
    memcpy(r->data, data, (size_t)n * sizeof(float));
  r->ndim = ndim;
  if (ndim)
    memcpy(r->shape, shape, ndim * sizeof *shape);
  out->n++;
  return 0;
}

static int add_text(ebb_items *out, const char *name, ebb_item_kind kind, const char *text) {
  pl_item_rec *r;
  int rc = add_rec(out, name, kind, &r);
  if (rc)
    return rc;
  if (!text)
    return drop_last(out, ebb_seterr(EBB_EINVAL, "item '%s': no text", name));
  r->text = strdup(text);
  if (!r->text)
    return drop_last(out, ebb_seterr(EBB_ENOMEM, "item '%s': out of host memory", name));
  out->n++;
  return 0;
}

int pl_items_add_json(ebb_items *out, const char *name, const char *json) {
  return add_text(out, name, EBB_ITEM_JSON, json);
}

int pl_items_add_file(ebb_items *out, const char *name, const char *path) {
  return add_text(out, name, EBB_ITEM_FILE, path);
}

int pl_items_add_device_tensor(ebb_items *out, dev_device *dev, const char *name, uint64_t src,
                               uint32_t ndim, const uint64_t *shape) {
  if (!out || !out->owner)
    return ebb_seterr(EBB_EINVAL, "item '%s': this collection takes no device tensors",
                      name ? name : "(null)");
  pl_item_rec *r;
  int rc = add_rec(out, name, EBB_ITEM_TENSOR, &r);
  if (rc)
    return rc;
  uint64_t n = pl_tensor_elems(ndim, shape);
  if (ndim > 8 || (ndim && !shape) || n == UINT64_MAX || (n && !src))
    return drop_last(out, ebb_seterr(EBB_EINVAL, "item '%s': bad device tensor", name));
  size_t bytes = n ? (size_t)n * sizeof(float) : sizeof(float);
  rc = mem_alloc(out->owner, bytes, __FILE__ ":device-tensor-item", &r->dptr);
  if (rc) {
    r->dptr = 0;
    return drop_last(out, ebb_errctx(rc, "item '%s': ", name));
  }
  if (n && (rc = dev_copy_dtod(dev, r->dptr, src, bytes)))
    return drop_last(out, ebb_errctx(rc, "item '%s': copy to the job: ", name));
  r->ndim = ndim;
  if (ndim)
    memcpy(r->shape, shape, ndim * sizeof *shape);
  out->n++;
  return 0;
}

int pl_items_take(ebb_items *dst, ebb_items *src) {
  for (int i = 0; i < src->n; i++)
    for (const ebb_items *c = dst; c; c = c->parent)
      for (int j = 0; j < c->n; j++)
        if (!strcmp(c->v[j].name, src->v[i].name))
          return ebb_seterr(EBB_EINVAL, "item '%s': the job already has an item of that name",
                            src->v[i].name);
  if (dst->n + src->n > dst->cap) {
    int cap = dst->n + src->n + 8;
    pl_item_rec *v = realloc(dst->v, (size_t)cap * sizeof *v);
    if (!v)
      return ebb_seterr(EBB_ENOMEM, "items: out of host memory");
    dst->v = v;
    dst->cap = cap;
  }
  /* Device tensors are already blocks of the job's owner (a stage's output
   * collection is created with it), so moving the record moves ownership. */
  for (int i = 0; i < src->n; i++)
    dst->v[dst->n++] = src->v[i];
  src->n = 0;
  return 0;
}

json_t *pl_item_describe(const pl_item_rec *it) {
  wrk_wire_item w = {.kind = it->kind,
                     .name = it->name,
                     .text = it->text,
                     .frames = it->frames,
                     .channels = it->channels,
                     .rate = it->rate,
                     .ndim = it->ndim};
  memcpy(w.shape, it->shape, sizeof w.shape);
  return wrk_wire_item_encode(&w);
}

/* Fills a new payload file (dst, n bytes) from the item: its host bytes,
 * or a device tensor copied from the device straight into the file. */
static int fill_payload(const pl_item_rec *it, dev_device *dev, void *dst, size_t n) {
  const void *p = it->kind == EBB_ITEM_AUDIO ? (const void *)it->samples : (const void *)it->data;
  if (p) {
    memcpy(dst, p, n);
    return 0;
  }
  return dev_copy_dtoh(dev, dst, it->dptr, n);
}

int pl_item_to_wire(const pl_item_rec *it, dev_device *dev, pl_item_put_fn put, void *arg,
                    json_t *arr) {
  json_t *o = pl_item_describe(it);
  if (!o || json_array_append_new(arr, o))
    return ebb_seterr(EBB_ENOMEM, "item '%s': out of host memory", it->name);
  if (it->kind != EBB_ITEM_AUDIO && it->kind != EBB_ITEM_TENSOR)
    return 0;
  uint64_t elems = it->kind == EBB_ITEM_AUDIO ? it->frames * it->channels
                                              : pl_tensor_elems(it->ndim, it->shape);
  size_t n = (size_t)elems * sizeof(float);
  void *dst = NULL;
  int rc = put(arg, n ? it->shm : NULL, n, o, &dst); /* it->shm: handed over, no copy */
  if (rc || !dst)
    return rc;
  rc = fill_payload(it, dev, dst, n);
  wrk_shm_unmap(dst, n);
  if (rc)
    return ebb_errctx(rc, "item '%s': ", it->name);
  return 0;
}

int pl_item_put_shm(const char *name, const char *shm, size_t n, json_t *obj, void **dst) {
  *dst = NULL;
  int rc = shm ? wrk_shm_link(shm, name)
           : n ? wrk_shm_create(name, n, dst)
               : wrk_shm_put(name, NULL, 0);
  if (!rc && (rc = wrk_wire_item_set_payload(obj, name, n)) && *dst) {
    wrk_shm_unmap(*dst, n);
    *dst = NULL;
  }
  return rc;
}

/* Adds the decoded item w whose payload is the mapping map (w->bytes
 * long); owned: the file's name when the item owns it. On failure the
 * caller still holds map and the file. */
static int add_mapped(ebb_items *out, const wrk_wire_item *w, void *map, const char *owned) {
  pl_item_rec *r;
  int rc = add_rec(out, w->name, w->kind, &r);
  if (rc)
    return rc;
  if (owned && !(r->shm = strdup(owned)))
    return drop_last(out, ebb_seterr(EBB_ENOMEM, "item '%s': out of host memory", w->name));
  r->map_bytes = w->bytes;
  if (w->kind == EBB_ITEM_AUDIO) {
    r->samples = map;
    r->frames = w->frames;
    r->channels = w->channels;
    r->rate = w->rate;
  } else {
    r->data = map;
    r->ndim = w->ndim;
    memcpy(r->shape, w->shape, sizeof r->shape);
  }
  out->n++;
  return 0;
}

/* A payload of a decoded item, without a copy: taken over (take) or mapped
 * from the sender's file. */
static int add_payload(ebb_items *out, wrk_wire_item *w, int take) {
  static atomic_uint seq;
  char name[64];
  void *map = NULL;
  int rc;
  if (take) {
    snprintf(name, sizeof name, "ebb-h%ld-%u", (long)getpid(), atomic_fetch_add(&seq, 1));
    if ((rc = wrk_shm_take(w->shm, name, w->bytes, &map)))
      return ebb_errctx(EBB_EPROTO, "item #%zu ('%.100s'): ", w->index + 1, w->name);
  } else {
    if ((rc = wrk_wire_item_map(w)))
      return rc;
    map = (void *)w->data;
  }
  rc = add_mapped(out, w, map, take ? name : NULL);
  if (rc) {
    wrk_shm_unmap(map, w->bytes);
    if (take)
      wrk_shm_unlink(name);
  }
  return rc;
}

int pl_item_from_wire(ebb_items *out, const json_t *o, size_t index, const char *shm_prefix,
                      int take) {
  wrk_wire_item w;
  int rc = wrk_wire_item_decode(o, index, shm_prefix, &w);
  if (rc)
    return rc;
  switch (w.kind) {
  case EBB_ITEM_AUDIO:
    if (w.bytes)
      return add_payload(out, &w, take);
    return pl_items_add_audio(out, w.name, NULL, 0, w.channels, w.rate);
  case EBB_ITEM_TENSOR:
    if (w.bytes)
      return add_payload(out, &w, take);
    return pl_items_add_tensor(out, w.name, NULL, w.ndim, w.shape);
  case EBB_ITEM_JSON: return pl_items_add_json(out, w.name, w.text);
  case EBB_ITEM_FILE: return pl_items_add_file(out, w.name, w.text);
  }
  return 0;
}
