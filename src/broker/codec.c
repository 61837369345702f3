/* The broker's messages (docs/broker.md): one JSON object a line, both ends
 * through this one codec, so a check written here cannot be forgotten on
 * either side. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "broker/broker.h"
#include "ebb/error.h"

static int put_line(json_t *o, char *buf, size_t len) {
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!s)
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory encoding a message");
  size_t n = strlen(s);
  if (n + 2 > len || n + 1 > BRK_MAX_LINE) {
    free(s);
    return ebb_seterr(EBB_EINVAL, "broker: a message of %zu bytes is over the %d-byte limit", n,
                      BRK_MAX_LINE);
  }
  memcpy(buf, s, n);
  buf[n] = '\n';
  buf[n + 1] = '\0';
  free(s);
  return (int)n + 1;
}

static const char *const by_names[] = {"", "anyone", "token", "operator"};

static const char *by_name(int by) {
  return by >= BRK_BY_ANYONE && by <= BRK_BY_OPERATOR ? by_names[by] : "?";
}

int brk_encode_request(const brk_request *r, char *buf, size_t len) {
  json_t *o =
      json_pack("{s:i, s:s}", "v", BRK_VERSION, "op", r->op == BRK_OP_INFO ? "info" : "reclaim");
  if (o && r->op == BRK_OP_RECLAIM) {
    json_object_set_new(o, "device", json_string(r->device));
    json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
    json_object_set_new(o, "asker", json_integer((json_int_t)r->asker));
    json_object_set_new(o, "by", json_string(by_name(r->by ? r->by : BRK_BY_OPERATOR)));
  }
  if (!o)
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory encoding a message");
  return put_line(o, buf, len);
}

static json_t *kept_json(const brk_answer *a) {
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < a->nkept; i++)
    json_array_append_new(arr, json_pack("{s:s, s:I, s:s}", "what", a->kept[i].what, "bytes",
                                         (json_int_t)a->kept[i].bytes, "why", a->kept[i].why));
  return arr;
}

static json_t *devices_json(const brk_answer *a) {
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < a->ndevices; i++) {
    const brk_device_info *d = &a->devices[i];
    json_array_append_new(arr,
                          json_pack("{s:s, s:s, s:I, s:I, s:f}", "uuid", d->uuid, "label", d->label,
                                    "held_bytes", (json_int_t)d->held_bytes, "givable_bytes",
                                    (json_int_t)d->givable_bytes, "idle_s", d->idle_s));
  }
  return arr;
}

int brk_encode_answer(int op, const brk_answer *a, char *buf, size_t len) {
  json_t *o =
      json_pack("{s:i, s:I, s:s}", "v", BRK_VERSION, "pid", (json_int_t)a->pid, "what", a->what);
  if (!o)
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory encoding a message");
  if (a->err_code[0])
    json_object_set_new(o, "error",
                        json_pack("{s:s, s:s}", "code", a->err_code, "message", a->err_msg));
  else if (op == BRK_OP_INFO)
    json_object_set_new(o, "devices", devices_json(a));
  else {
    json_object_set_new(o, "device", json_string(a->device));
    json_object_set_new(o, "label", json_string(a->label));
    json_object_set_new(o, "given_bytes", json_integer((json_int_t)a->given_bytes));
    json_object_set_new(o, "ms", json_real(a->ms));
    json_object_set_new(o, "reason", json_string(a->reason));
    json_object_set_new(o, "kept", kept_json(a));
    if (a->busy)
      json_object_set_new(o, "busy", json_true());
  }
  return put_line(o, buf, len);
}

int brk_encode_commit(const brk_answer *a, char *buf, size_t len) {
  json_t *o = json_pack("{s:i, s:I, s:s, s:s, s:s, s:I, s:f}", "v", BRK_VERSION, "pid",
                        (json_int_t)a->pid, "what", a->what, "device", a->device, "label", a->label,
                        "commit_bytes", (json_int_t)a->commit_bytes, "eta_ms", a->eta_ms);
  if (!o)
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory encoding a message");
  return put_line(o, buf, len);
}

/* --- decoding ---------------------------------------------------------------- */
static int parse_line(const char *line, const char *what, json_t **out) {
  json_error_t e;
  size_t n = strnlen(line, BRK_MAX_LINE + 1);
  if (n > BRK_MAX_LINE)
    return ebb_seterr(EBB_EPROTO, "broker %s: over the %d-byte limit", what, BRK_MAX_LINE);
  json_t *o = json_loadb(line, n, JSON_REJECT_DUPLICATES, &e);
  if (!o || !json_is_object(o)) {
    json_decref(o);
    return ebb_seterr(EBB_EPROTO, "broker %s: not a JSON object (%s)", what,
                      o ? "another JSON value" : e.text);
  }
  json_t *v = json_object_get(o, "v");
  if (!json_is_integer(v) || json_integer_value(v) != BRK_VERSION) {
    long long got = json_is_integer(v) ? (long long)json_integer_value(v) : -1;
    json_decref(o);
    return ebb_seterr(EBB_EPROTO, "broker %s: version %lld, this side speaks %d", what, got,
                      BRK_VERSION);
  }
  *out = o;
  return 0;
}

static int get_str(json_t *o, const char *key, const char *what, char *dst, size_t len,
                   int required) {
  json_t *v = json_object_get(o, key);
  if (!v && !required) {
    dst[0] = '\0';
    return 0;
  }
  if (!json_is_string(v) || strlen(json_string_value(v)) >= len)
    return ebb_seterr(EBB_EPROTO, "broker %s: \"%s\" must be a string of under %zu bytes", what,
                      key, len);
  memcpy(dst, json_string_value(v), strlen(json_string_value(v)) + 1);
  return 0;
}

static int get_u64(json_t *o, const char *key, const char *what, uint64_t *dst, int required) {
  json_t *v = json_object_get(o, key);
  if (!v && !required) {
    *dst = 0;
    return 0;
  }
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return ebb_seterr(EBB_EPROTO, "broker %s: \"%s\" must be an integer >= 0", what, key);
  *dst = (uint64_t)json_integer_value(v);
  return 0;
}

/* "by" names whose authority a reclaim carries: required, one of three. */
static int get_by(json_t *o, int *by) {
  const char *v = json_string_value(json_object_get(o, "by"));
  for (int i = BRK_BY_ANYONE; v && i <= BRK_BY_OPERATOR; i++)
    if (!strcmp(v, by_names[i])) {
      *by = i;
      return 0;
    }
  return ebb_seterr(EBB_EPROTO,
                    "broker request: \"by\" must be \"anyone\", \"token\" or \"operator\"");
}

int brk_decode_request(const char *line, brk_request *out) {
  memset(out, 0, sizeof *out);
  json_t *o;
  int rc = parse_line(line, "request", &o);
  if (rc)
    return rc;
  const char *op = json_string_value(json_object_get(o, "op"));
  uint64_t asker = 0;
  if (op && !strcmp(op, "info"))
    out->op = BRK_OP_INFO;
  else if (op && !strcmp(op, "reclaim")) {
    out->op = BRK_OP_RECLAIM;
    if (!(rc = get_str(o, "device", "request", out->device, sizeof out->device, 1)) &&
        !(rc = get_u64(o, "bytes", "request", &out->bytes, 1)) &&
        !(rc = get_u64(o, "asker", "request", &asker, 0)))
      rc = get_by(o, &out->by);
    out->asker = (int64_t)asker;
  } else
    rc = ebb_seterr(EBB_EPROTO, "broker request: \"op\" must be \"info\" or \"reclaim\"");
  json_decref(o);
  return rc;
}

static int decode_kept(json_t *arr, brk_answer *a) {
  size_t i;
  json_t *k;
  if (!json_is_array(arr))
    return ebb_seterr(EBB_EPROTO, "broker answer: \"kept\" must be an array");
  json_array_foreach(arr, i, k) {
    if (a->nkept == BRK_MAX_KEPT)
      break;
    brk_kept *d = &a->kept[a->nkept++];
    int rc = get_str(k, "what", "answer kept", d->what, sizeof d->what, 1);
    if (!rc)
      rc = get_u64(k, "bytes", "answer kept", &d->bytes, 1);
    if (!rc)
      rc = get_str(k, "why", "answer kept", d->why, sizeof d->why, 1);
    if (rc)
      return rc;
  }
  return 0;
}

static int decode_devices(json_t *arr, brk_answer *a) {
  size_t i;
  json_t *d;
  if (!json_is_array(arr))
    return ebb_seterr(EBB_EPROTO, "broker answer: \"devices\" must be an array");
  json_array_foreach(arr, i, d) {
    if (a->ndevices == BRK_MAX_DEVICES)
      break;
    brk_device_info *x = &a->devices[a->ndevices++];
    json_t *idle = json_object_get(d, "idle_s");
    int rc = get_str(d, "uuid", "answer device", x->uuid, sizeof x->uuid, 1);
    if (!rc)
      rc = get_str(d, "label", "answer device", x->label, sizeof x->label, 0);
    if (!rc)
      rc = get_u64(d, "held_bytes", "answer device", &x->held_bytes, 0);
    if (!rc)
      rc = get_u64(d, "givable_bytes", "answer device", &x->givable_bytes, 0);
    if (rc)
      return rc;
    x->idle_s = json_is_number(idle) ? json_number_value(idle) : 0;
  }
  return 0;
}

static int decode_body(int op, json_t *o, brk_answer *out) {
  json_t *err = json_object_get(o, "error");
  if (err) {
    int rc = get_str(err, "code", "answer error", out->err_code, sizeof out->err_code, 1);
    return rc ? rc : get_str(err, "message", "answer error", out->err_msg, sizeof out->err_msg, 0);
  }
  if (op == BRK_OP_INFO)
    return decode_devices(json_object_get(o, "devices"), out);
  json_t *ms = json_object_get(o, "ms");
  out->ms = json_is_number(ms) ? json_number_value(ms) : 0;
  int rc = get_str(o, "device", "answer", out->device, sizeof out->device, 1);
  if (!rc)
    rc = get_str(o, "label", "answer", out->label, sizeof out->label, 0);
  if (!rc)
    rc = get_u64(o, "given_bytes", "answer", &out->given_bytes, 1);
  if (!rc)
    rc = get_str(o, "reason", "answer", out->reason, sizeof out->reason, 0);
  if (!rc && json_object_get(o, "kept"))
    rc = decode_kept(json_object_get(o, "kept"), out);
  out->busy = json_is_true(json_object_get(o, "busy"));
  return rc;
}

static int decode_commit(json_t *o, brk_answer *out) {
  json_t *eta = json_object_get(o, "eta_ms");
  out->commit = 1;
  out->eta_ms = json_is_number(eta) ? json_number_value(eta) : 0;
  int rc = get_str(o, "device", "commit", out->device, sizeof out->device, 1);
  if (!rc)
    rc = get_str(o, "label", "commit", out->label, sizeof out->label, 0);
  return rc ? rc : get_u64(o, "commit_bytes", "commit", &out->commit_bytes, 1);
}

int brk_decode_answer(int op, const char *line, brk_answer *out) {
  memset(out, 0, sizeof *out);
  json_t *o;
  int rc = parse_line(line, "answer", &o);
  if (rc)
    return rc;
  uint64_t pid = 0;
  rc = get_u64(o, "pid", "answer", &pid, 1);
  out->pid = (int64_t)pid;
  if (!rc)
    rc = get_str(o, "what", "answer", out->what, sizeof out->what, 0);
  if (!rc)
    rc = op == BRK_OP_RECLAIM && json_object_get(o, "commit_bytes") && !json_object_get(o, "error")
             ? decode_commit(o, out)
             : decode_body(op, o, out);
  json_decref(o);
  return rc;
}
