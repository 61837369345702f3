/* The worker protocol's item codec (item_wire.h). */
#include "worker/item_wire.h"

#include <string.h>

#include "worker/wire.h"

uint64_t wrk_wire_tensor_elems(uint32_t ndim, const uint64_t *shape) {
  if (ndim > EBB_WIRE_ITEM_MAX_DIMS || (ndim && !shape))
    return UINT64_MAX;
  uint64_t n = 1;
  for (uint32_t i = 0; i < ndim; i++) {
    if (shape[i] && n > (UINT64_MAX / 8) / shape[i])
      return UINT64_MAX;
    n *= shape[i];
  }
  return n;
}

static int bad(const wrk_wire_item *it, const char *what) {
  if (it->name)
    return ebb_seterr(EBB_EPROTO, "item #%zu ('%.100s') %s", it->index + 1, it->name, what);
  return ebb_seterr(EBB_EPROTO, "item #%zu %s", it->index + 1, what);
}

/* A member that must be a non-negative integer when present: 0 ok (*v set,
 * 0 when absent), -1 when it is something else. */
static int get_size(const json_t *o, const char *key, uint64_t *v) {
  json_t *j = json_object_get(o, key);
  *v = 0;
  if (!j)
    return 0;
  if (!json_is_integer(j) || json_integer_value(j) < 0)
    return -1;
  *v = (uint64_t)json_integer_value(j);
  return 0;
}

static int decode_audio(const json_t *o, wrk_wire_item *it, uint64_t *elems) {
  uint64_t frames, ch, rate;
  if (get_size(o, "frames", &frames) || get_size(o, "channels", &ch) ||
      get_size(o, "rate", &rate) || !ch || ch > EBB_WIRE_ITEM_MAX_CHANNELS || !rate ||
      rate > EBB_WIRE_ITEM_MAX_RATE || frames > EBB_WIRE_ITEM_MAX_ELEMS / ch)
    return bad(it, "(audio) needs frames >= 0, channels 1..64 and rate 1..10000000 "
                   "(at most 2^40 samples)");
  it->frames = frames;
  it->channels = (uint32_t)ch;
  it->rate = (uint32_t)rate;
  *elems = frames * ch;
  return 0;
}

static int decode_tensor(const json_t *o, wrk_wire_item *it, uint64_t *elems) {
  json_t *sh = json_object_get(o, "shape");
  if (!json_is_array(sh) || json_array_size(sh) > EBB_WIRE_ITEM_MAX_DIMS)
    return bad(it, "(tensor) needs a \"shape\" array of at most 8 sizes");
  it->ndim = (uint32_t)json_array_size(sh);
  for (uint32_t d = 0; d < it->ndim; d++) {
    json_t *v = json_array_get(sh, d);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
      return bad(it, "(tensor) has a shape entry that is not a size");
    it->shape[d] = (uint64_t)json_integer_value(v);
  }
  *elems = wrk_wire_tensor_elems(it->ndim, it->shape);
  if (*elems == UINT64_MAX || *elems > EBB_WIRE_ITEM_MAX_ELEMS)
    return bad(it, "(tensor) has a shape too large (at most 2^40 elements)");
  return 0;
}

/* The payload reference of an audio or tensor item of elems elements. */
static int decode_payload(const json_t *o, const char *prefix, uint64_t elems, wrk_wire_item *it) {
  json_t *shm = json_object_get(o, "shm");
  uint64_t bytes;
  it->bytes = (size_t)elems * sizeof(float);
  if (get_size(o, "bytes", &bytes) || (json_object_get(o, "bytes") && bytes != (uint64_t)it->bytes))
    return bad(it, "has \"bytes\" that do not match its shape (elements x 4)");
  if (!it->bytes && !shm)
    return 0;
  it->shm = json_string_value(shm);
  if (!it->shm || !wrk_shm_name_ok(it->shm) ||
      (prefix && strncmp(it->shm, prefix, strlen(prefix)))) { /* never another's file */
    it->shm = NULL;
    return bad(it, prefix ? "needs \"shm\": a name starting with the hello's shm_prefix"
                          : "needs \"shm\": a shared memory name");
  }
  return 0;
}

int wrk_wire_item_decode(const json_t *o, size_t index, const char *shm_prefix, wrk_wire_item *it) {
  memset(it, 0, sizeof *it);
  it->index = index;
  const char *kind = json_string_value(json_object_get(o, "kind"));
  const char *name = json_string_value(json_object_get(o, "name"));
  if (!json_is_object(o) || !kind || !name || !*name)
    return bad(it, "needs a string \"kind\" and a non-empty \"name\"");
  it->name = name;
  uint64_t elems = 0;
  int rc;
  if (!strcmp(kind, "json") || !strcmp(kind, "file")) {
    it->kind = *kind == 'j' ? EBB_ITEM_JSON : EBB_ITEM_FILE;
    it->text = json_string_value(json_object_get(o, *kind == 'j' ? "text" : "path"));
    return it->text ? 0
                    : bad(it, *kind == 'j' ? "(json) has no string \"text\""
                                           : "(file) has no string \"path\"");
  }
  if (!strcmp(kind, "audio")) {
    it->kind = EBB_ITEM_AUDIO;
    rc = decode_audio(o, it, &elems);
  } else if (!strcmp(kind, "tensor")) {
    it->kind = EBB_ITEM_TENSOR;
    rc = decode_tensor(o, it, &elems);
  } else {
    return bad(it, "has an unknown kind (audio, tensor, json, file)");
  }
  return rc ? rc : decode_payload(o, shm_prefix, elems, it);
}

int wrk_wire_item_map(wrk_wire_item *it) {
  it->data = NULL;
  if (!it->bytes)
    return 0;
  const void *p = NULL;
  if (wrk_shm_map(it->shm, it->bytes, &p))
    return ebb_errctx(EBB_EPROTO, "item #%zu ('%.100s'): ", it->index + 1, it->name);
  it->data = p;
  return 0;
}

void wrk_wire_item_unmap(wrk_wire_item *it) {
  wrk_shm_unmap(it->data, it->bytes);
  it->data = NULL;
}

static int set_shape(json_t *o, uint32_t ndim, const uint64_t *shape) {
  json_t *a = json_array();
  for (uint32_t d = 0; a && d < ndim; d++)
    if (json_array_append_new(a, json_integer((json_int_t)shape[d])))
      break;
  return json_object_set_new(o, "shape", a);
}

json_t *wrk_wire_item_encode(const wrk_wire_item *it) {
  static const char *const kinds[] = {[EBB_ITEM_AUDIO] = "audio",
                                      [EBB_ITEM_TENSOR] = "tensor",
                                      [EBB_ITEM_JSON] = "json",
                                      [EBB_ITEM_FILE] = "file"};
  if (it->kind < EBB_ITEM_AUDIO || it->kind > EBB_ITEM_FILE)
    return NULL;
  json_t *o = json_object();
  int err = !o || json_object_set_new(o, "name", json_string(it->name)) ||
            json_object_set_new(o, "kind", json_string(kinds[it->kind]));
  switch (err ? 0 : it->kind) {
  case EBB_ITEM_AUDIO:
    err = json_object_set_new(o, "frames", json_integer((json_int_t)it->frames)) ||
          json_object_set_new(o, "channels", json_integer(it->channels)) ||
          json_object_set_new(o, "rate", json_integer(it->rate));
    break;
  case EBB_ITEM_TENSOR: err = set_shape(o, it->ndim, it->shape); break;
  case EBB_ITEM_JSON:
  case EBB_ITEM_FILE:
    err =
        json_object_set_new(o, it->kind == EBB_ITEM_JSON ? "text" : "path", json_string(it->text));
    break;
  }
  if (err) {
    json_decref(o);
    return NULL;
  }
  return o;
}

int wrk_wire_item_set_payload(json_t *o, const char *shm, size_t bytes) {
  if (json_object_set_new(o, "shm", json_string(shm)) ||
      json_object_set_new(o, "bytes", json_integer((json_int_t)bytes)))
    return ebb_seterr(EBB_ENOMEM, "describing a payload: out of host memory");
  return 0;
}
