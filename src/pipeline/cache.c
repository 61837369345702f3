/* The stage result cache on disk (cache.h): keys, lookups, stores and the
 * checksum that detects a corrupt entry. */
#include "pipeline/cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "pipeline/sha256.h"

#define MAGIC "EBBCACHE"
#define FORMAT 1u

const char *pl_cache_default_dir(char *buf, size_t n) {
  const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
  if (x && *x)
    snprintf(buf, n, "%s/ebb", x);
  else if (h && *h)
    snprintf(buf, n, "%s/.cache/ebb", h);
  else
    return NULL;
  return buf;
}

static void h_u32(pl_sha256 *s, uint32_t v) {
  uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  pl_sha256_update(s, b, 4);
}
static void h_str(pl_sha256 *s, const char *str) {
  h_u32(s, (uint32_t)strlen(str));
  pl_sha256_update(s, str, strlen(str));
}

static int hash_file(const char *path, uint8_t out[32]) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return ebb_seterr(EBB_EINPUT, "%s: cannot read: %s", path, strerror(errno));
  pl_sha256 s;
  pl_sha256_init(&s);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    pl_sha256_update(&s, buf, n);
  int err = ferror(f);
  fclose(f);
  if (err)
    return ebb_seterr(EBB_EIO, "%s: read error", path);
  pl_sha256_final(&s, out);
  return 0;
}

int pl_cache_key(const ebb_stage *st, const json_t *options, const ebb_items *in, uint8_t key[32]) {
  pl_sha256 s;
  pl_sha256_init(&s);
  h_str(&s, "ebb-stage-cache-v1");
  h_str(&s, st->name);
  h_u32(&s, st->version);
  char *opts = json_dumps(options, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  if (!opts)
    return ebb_seterr(EBB_ENOMEM, "cache key: out of host memory");
  h_str(&s, opts);
  free(opts);
  int n = pl_items_count(in);
  h_u32(&s, (uint32_t)n);
  for (int i = 0; i < n; i++) {
    const pl_item_rec *r = pl_items_rec(in, i);
    uint8_t d[32];
    pl_sha256 c;
    pl_sha256_init(&c);
    switch (r->kind) {
    case EBB_ITEM_AUDIO:
      h_u32(&c, r->channels);
      h_u32(&c, r->rate);
      pl_sha256_update(&c, r->samples, (size_t)(r->frames * r->channels) * sizeof(float));
      break;
    case EBB_ITEM_TENSOR: {
      if (r->dptr) /* a device tensor: key on its identity, not its bytes */
        return ebb_seterr(EBB_EUNSUPPORTED, "cache key: item '%s' is a device tensor", r->name);
      h_u32(&c, r->ndim);
      pl_sha256_update(&c, r->shape, r->ndim * sizeof r->shape[0]);
      pl_sha256_update(&c, r->data, (size_t)pl_tensor_elems(r->ndim, r->shape) * sizeof(float));
      break;
    }
    case EBB_ITEM_JSON: h_str(&c, r->text); break;
    case EBB_ITEM_FILE: {
      int rc = hash_file(r->text, d);
      if (rc)
        return rc;
      pl_sha256_update(&c, d, 32);
      break;
    }
    }
    pl_sha256_final(&c, d);
    h_u32(&s, (uint32_t)r->kind);
    h_str(&s, r->name);
    pl_sha256_update(&s, d, 32);
  }
  pl_sha256_final(&s, key);
  return 0;
}

static void entry_path(const char *dir, const uint8_t key[32], char *buf, size_t n) {
  char hex[65];
  pl_sha256_hex(key, hex);
  snprintf(buf, n, "%s/%s.ebbc", dir, hex);
}

/* --- writing --------------------------------------------------------------- */
typedef struct wbuf {
  FILE *f;
  pl_sha256 s;
  int err;
} wbuf;

static void w(wbuf *b, const void *p, size_t n) {
  if (!n || b->err)
    return;
  pl_sha256_update(&b->s, p, n);
  if (fwrite(p, 1, n, b->f) != n)
    b->err = 1;
}
static void w32(wbuf *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  w(b, x, 4);
}
static void w64(wbuf *b, uint64_t v) {
  w32(b, (uint32_t)v);
  w32(b, (uint32_t)(v >> 32));
}

static int write_file_item(wbuf *b, const pl_item_rec *r) {
  const char *base = strrchr(r->text, '/');
  base = base ? base + 1 : r->text;
  FILE *f = fopen(r->text, "rb");
  if (!f)
    return ebb_seterr(EBB_EIO, "cache: item '%s': cannot read %s", r->name, r->text);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  w32(b, (uint32_t)strlen(base));
  w(b, base, strlen(base));
  w64(b, (uint64_t)(len < 0 ? 0 : len));
  char buf[65536];
  size_t n, total = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
    w(b, buf, n);
    total += n;
  }
  fclose(f);
  if (total != (size_t)len)
    return ebb_seterr(EBB_EIO, "cache: item '%s': %s changed while being stored", r->name, r->text);
  return 0;
}

int pl_cache_store(const char *dir, const uint8_t key[32], const ebb_items *items,
                   dev_device *dev) {
  int rc = base_mkdirs(dir, 0755, "cache directory");
  if (rc)
    return rc;
  char path[4200], tmp[4300];
  entry_path(dir, key, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  wbuf b = {.f = fopen(tmp, "wb")};
  if (!b.f)
    return ebb_seterr(EBB_EIO, "cache %s: %s", tmp, strerror(errno));
  pl_sha256_init(&b.s);
  w(&b, MAGIC, 8);
  w32(&b, FORMAT);
  int n = pl_items_count(items);
  w32(&b, (uint32_t)n);
  for (int i = 0; i < n && !rc; i++) {
    const pl_item_rec *r = pl_items_rec(items, i);
    w32(&b, (uint32_t)r->kind);
    w32(&b, (uint32_t)strlen(r->name));
    w(&b, r->name, strlen(r->name));
    switch (r->kind) {
    case EBB_ITEM_AUDIO:
      w64(&b, r->frames);
      w32(&b, r->channels);
      w32(&b, r->rate);
      w(&b, r->samples, (size_t)(r->frames * r->channels) * sizeof(float));
      break;
    case EBB_ITEM_TENSOR: {
      size_t bytes = (size_t)pl_tensor_elems(r->ndim, r->shape) * sizeof(float);
      w32(&b, r->ndim);
      for (uint32_t d = 0; d < r->ndim; d++)
        w64(&b, r->shape[d]);
      if (r->dptr) {
        float *h = malloc(bytes ? bytes : 1);
        if (!h || !dev || (rc = dev_copy_dtoh(dev, h, r->dptr, bytes)) != 0)
          rc = rc ? rc : ebb_seterr(EBB_ENOMEM, "cache: item '%s': cannot read it back", r->name);
        else
          w(&b, h, bytes);
        free(h);
      } else {
        w(&b, r->data, bytes);
      }
      break;
    }
    case EBB_ITEM_JSON:
      w64(&b, strlen(r->text));
      w(&b, r->text, strlen(r->text));
      break;
    case EBB_ITEM_FILE: rc = write_file_item(&b, r); break;
    }
  }
  uint8_t d[32];
  pl_sha256_final(&b.s, d);
  if (!b.err && fwrite(d, 1, 32, b.f) != 32)
    b.err = 1;
  if (fclose(b.f) != 0)
    b.err = 1;
  if (!rc && b.err)
    rc = ebb_seterr(EBB_EIO, "cache %s: write error", tmp);
  if (!rc && rename(tmp, path) != 0)
    rc = ebb_seterr(EBB_EIO, "cache %s: %s", path, strerror(errno));
  if (rc)
    unlink(tmp);
  return rc;
}

/* --- reading ----------------------------------------------------------------- */
typedef struct rbuf {
  const uint8_t *p;
  size_t n, off;
  int bad;
} rbuf;

static const void *r_take(rbuf *b, uint64_t n) {
  if (b->bad || n > b->n - b->off) {
    b->bad = 1;
    return NULL;
  }
  const void *p = b->p + b->off;
  b->off += (size_t)n;
  return p;
}
static uint32_t r32(rbuf *b) {
  const uint8_t *x = r_take(b, 4);
  return x ? (uint32_t)x[0] | (uint32_t)x[1] << 8 | (uint32_t)x[2] << 16 | (uint32_t)x[3] << 24 : 0;
}
static uint64_t r64(rbuf *b) {
  uint64_t lo = r32(b);
  return lo | (uint64_t)r32(b) << 32;
}
static char *r_str(rbuf *b, uint64_t n) {
  const char *s = r_take(b, n);
  char *o = s ? malloc((size_t)n + 1) : NULL;
  if (o) {
    memcpy(o, s, (size_t)n);
    o[n] = '\0';
  }
  if (s && !o)
    b->bad = 1;
  return o;
}

static int parse_entry(rbuf *b, ebb_items *out, const char *output_dir, const char *path) {
  const char *magic = r_take(b, 8);
  if (!magic || memcmp(magic, MAGIC, 8) || r32(b) != FORMAT)
    return ebb_seterr(EBB_EIO, "cache entry %s: not an ebb cache entry of format %u", path, FORMAT);
  uint32_t n = r32(b);
  int rc = 0;
  for (uint32_t i = 0; i < n && !rc && !b->bad; i++) {
    uint32_t kind = r32(b);
    char *name = r_str(b, r32(b));
    if (!name)
      break;
    switch (kind) {
    case EBB_ITEM_AUDIO: {
      uint64_t frames = r64(b);
      uint32_t ch = r32(b), rate = r32(b);
      const float *s = ch && frames <= UINT64_MAX / 4 / ch ? r_take(b, frames * ch * 4) : NULL;
      if (!s)
        b->bad = 1;
      else
        rc = pl_items_add_audio(out, name, s, frames, ch, rate);
      break;
    }
    case EBB_ITEM_TENSOR: {
      uint32_t nd = r32(b);
      uint64_t shape[8] = {0};
      if (nd > 8) {
        b->bad = 1;
        break;
      }
      for (uint32_t d = 0; d < nd; d++)
        shape[d] = r64(b);
      uint64_t el = pl_tensor_elems(nd, shape);
      const float *data = el != UINT64_MAX ? r_take(b, el * 4) : NULL;
      if (!data)
        b->bad = 1;
      else
        rc = pl_items_add_tensor(out, name, data, nd, shape);
      break;
    }
    case EBB_ITEM_JSON: {
      char *t = r_str(b, r64(b));
      if (t)
        rc = pl_items_add_json(out, name, t);
      free(t);
      break;
    }
    case EBB_ITEM_FILE: {
      char *base = r_str(b, r32(b));
      uint64_t len = r64(b);
      const void *content = r_take(b, len);
      if (base && content) {
        if (!*base || strchr(base, '/')) {
          b->bad = 1;
        } else {
          char fp[4200];
          snprintf(fp, sizeof fp, "%s/%s", output_dir ? output_dir : ".", base);
          FILE *f = fopen(fp, "wb");
          if (!f || fwrite(content, 1, (size_t)len, f) != len)
            rc = ebb_seterr(EBB_EIO, "cache: restoring %s: %s", fp, strerror(errno));
          if (f && fclose(f) != 0 && !rc)
            rc = ebb_seterr(EBB_EIO, "cache: restoring %s: write error", fp);
          if (!rc)
            rc = pl_items_add_file(out, name, fp);
        }
      }
      free(base);
      break;
    }
    default: b->bad = 1;
    }
    free(name);
  }
  if (!rc && (b->bad || b->off != b->n))
    rc = ebb_seterr(EBB_EIO, "cache entry %s: malformed", path);
  return rc;
}

int pl_cache_load(const char *dir, const uint8_t key[32], ebb_items *out, const char *output_dir,
                  int *hit, int *corrupt) {
  char path[4200];
  entry_path(dir, key, path, sizeof path);
  *hit = 0;
  *corrupt = 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  uint8_t *data = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 65536;
      uint8_t *d = realloc(data, cap);
      if (!d) {
        free(data);
        fclose(f);
        return ebb_seterr(EBB_ENOMEM, "cache entry %s: out of host memory", path);
      }
      data = d;
    }
    size_t got = fread(data + n, 1, cap - n, f);
    if (!got)
      break;
    n += got;
  }
  fclose(f);
  int rc = 0;
  uint8_t d[32];
  pl_sha256 s;
  pl_sha256_init(&s);
  if (n < 32 + 16) {
    rc = ebb_seterr(EBB_EIO, "cache entry %s: truncated (%zu bytes)", path, n);
  } else {
    pl_sha256_update(&s, data, n - 32);
    pl_sha256_final(&s, d);
    if (memcmp(d, data + n - 32, 32))
      rc = ebb_seterr(EBB_EIO, "cache entry %s: checksum mismatch", path);
  }
  if (!rc) {
    /* parse into a scratch collection so a bad entry adds nothing to out */
    ebb_items *tmp;
    if ((rc = pl_items_create(NULL, out, &tmp)) == 0) {
      rbuf b = {data, n - 32, 0, 0};
      rc = parse_entry(&b, tmp, output_dir, path);
      if (!rc)
        rc = pl_items_take(out, tmp);
      pl_items_destroy(tmp);
    }
  }
  free(data);
  if (rc == EBB_EIO || rc == EBB_EINVAL) { /* EINVAL: items the entry names badly (empty, twice) */
    *corrupt = 1;
    unlink(path);
    return 0;
  }
  if (!rc)
    *hit = 1;
  return rc;
}
