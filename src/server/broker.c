/* POST /v1/memory/reclaim {"device": "cuda:0", "bytes": N} (admin): asks
 * the other processes on the device for memory, as `ebb reclaim` does
 * (docs/broker.md). The asking itself is broker_peer.c's (srv_broker_reclaim). */
#include <string.h>

#include "server/internal.h"

/* A whole number of bytes > 0 (34451434260.0 is one: JSON has one number type). */
static int whole_bytes(json_t *v) {
  double x = json_number_value(v);
  return json_is_number(v) && x >= 1 && x < 1.8e19 && x == (double)(uint64_t)x;
}

enum MHD_Result srv_h_memory_reclaim(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                     const char *method) {
  (void)method;
  if (!s->broker)
    return srv_send_err(c, r, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable",
                        "this server has no broker (docs/broker.md)");
  if (r->kind != BODY_BUFFER || !r->len)
    return srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "expected a JSON body {\"device\": \"cuda:N\", \"bytes\": N}");
  json_error_t je;
  json_t *b = json_loadb(r->buf, r->len, 0, &je);
  if (!b)
    return srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_json",
                        "the body is not valid JSON: %s at line %d, column %d", je.text, je.line,
                        je.column);
  const char *key, *extra = NULL;
  json_t *v;
  json_object_foreach(b, key, v) if (strcmp(key, "device") && strcmp(key, "bytes")) extra = key;
  json_t *dev = json_object_get(b, "device"), *bytes = json_object_get(b, "bytes");
  enum MHD_Result res;
  if (extra)
    res = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                       "unknown key \"%s\" in the body (known: device, bytes)", extra);
  else if (!json_is_string(dev) || !whole_bytes(bytes))
    res = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                       "expected {\"device\": \"cuda:N\", \"bytes\": N > 0}");
  else {
    json_t *ans = NULL;
    int rc = srv_broker_reclaim(json_string_value(dev), (uint64_t)json_number_value(bytes), &ans);
    res = rc ? srv_send_ebb_err(c, r, rc, ebb_errmsg()) : srv_send_json(c, r, MHD_HTTP_OK, ans);
  }
  json_decref(b);
  return res;
}
