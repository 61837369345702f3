/* The worker protocol's codec, both layers: the bytes as a stream of frames
 * for wrk_wire_decode (a frame is a decoded object with a string "type",
 * "need more" consuming nothing, or EBB_EPROTO with a message; never more
 * than was given), and every item of a decoded frame's "items" for the one
 * item decoder both ends use (wrk_wire_item_decode): accepted items are in
 * range (channels 1..64, rate 1..10000000, at most 2^40 elements, bytes =
 * elements x 4, a payload named with the prefix) and encode back to an item
 * that decodes the same. */
#include "fuzz_util.h"
#include "worker/item_wire.h"
#include "worker/wire.h"

#define PREFIX "ebb-w1-2-"

static void check_item(const json_t *o, size_t i) {
  wrk_wire_item it;
  int rc = wrk_wire_item_decode(o, i, PREFIX, &it);
  if (rc) {
    FUZZ_CHECK(rc == EBB_EPROTO && strstr(ebb_errmsg(), "item #"), "item rc %d: '%s'", rc,
               ebb_errmsg());
    return;
  }
  uint64_t elems = it.kind == EBB_ITEM_AUDIO    ? it.frames * it.channels
                   : it.kind == EBB_ITEM_TENSOR ? wrk_wire_tensor_elems(it.ndim, it.shape)
                                                : 0;
  FUZZ_CHECK(it.name && *it.name, "an item without a name was accepted");
  if (it.kind == EBB_ITEM_AUDIO)
    FUZZ_CHECK(it.channels >= 1 && it.channels <= 64 && it.rate >= 1 && it.rate <= 10000000,
               "audio with %u channels at %u Hz accepted", it.channels, it.rate);
  FUZZ_CHECK(elems <= EBB_WIRE_ITEM_MAX_ELEMS && it.bytes == elems * 4,
             "%llu elements, %zu bytes accepted", (unsigned long long)elems, it.bytes);
  FUZZ_CHECK(!it.bytes || (it.shm && !strncmp(it.shm, PREFIX, strlen(PREFIX))),
             "a payload outside the prefix accepted");
  FUZZ_CHECK(it.kind == EBB_ITEM_AUDIO || it.kind == EBB_ITEM_TENSOR || it.text,
             "a json/file item without its text accepted");
  /* encode back: the same item */
  json_t *back = wrk_wire_item_encode(&it);
  FUZZ_CHECK(back != NULL, "an accepted item does not encode");
  if (it.shm)
    FUZZ_CHECK(wrk_wire_item_set_payload(back, it.shm, it.bytes) == 0, "payload");
  wrk_wire_item again;
  FUZZ_CHECK(wrk_wire_item_decode(back, i, PREFIX, &again) == 0, "re-encoded item refused: %s",
             ebb_errmsg());
  FUZZ_CHECK(again.kind == it.kind && again.bytes == it.bytes && again.frames == it.frames &&
                 again.ndim == it.ndim && !strcmp(again.name, it.name),
             "re-encoded item differs");
  json_decref(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t off = 0;
  for (int frames = 0; off < size && frames < 64; frames++) {
    json_t *m = NULL;
    size_t used = 0;
    int rc = wrk_wire_decode(data + off, size - off, 0, &m, &used);
    if (rc) {
      FUZZ_CHECK(rc == EBB_EPROTO && m == NULL && ebb_errmsg()[0], "frame rc %d", rc);
      break;
    }
    if (!m) {
      FUZZ_CHECK(used == 0, "an incomplete frame consumed %zu bytes", used);
      break;
    }
    FUZZ_CHECK(used >= 5 && used <= size - off, "used %zu of %zu", used, size - off);
    FUZZ_CHECK(json_is_object(m) && json_string_value(json_object_get(m, "type")),
               "a decoded frame without a string type");
    json_t *items = json_object_get(m, "items");
    for (size_t i = 0; i < json_array_size(items); i++)
      check_item(json_array_get(items, i), i);
    json_decref(m);
    off += used;
  }
  return 0;
}
