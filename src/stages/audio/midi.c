/* See midi.h. */
#include "stages/audio/midi.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"

/* Seconds to ticks at the fixed tempo (rounded to the nearest tick). */
static long stg_midi_ticks(double seconds) {
  return lround(seconds * 1e6 / EBB_MIDI_TEMPO_US * EBB_MIDI_TPQ);
}

typedef struct ev {
  long tick;
  int on; /* 0 off, 1 on: offs first at the same tick */
  int key, vel;
} ev;

static int ev_cmp(const void *a, const void *b) {
  const ev *x = a, *y = b;
  if (x->tick != y->tick)
    return x->tick < y->tick ? -1 : 1;
  if (x->on != y->on)
    return x->on - y->on;
  return x->key - y->key;
}

typedef struct buf {
  unsigned char *p;
  size_t n, cap;
  int oom;
} buf;

static void put(buf *b, const void *src, size_t n) {
  if (b->oom)
    return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->n + n)
      cap *= 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}
static void put8(buf *b, unsigned v) {
  unsigned char c = (unsigned char)v;
  put(b, &c, 1);
}
static void put_be(buf *b, uint32_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; i--)
    put8(b, (v >> (8 * i)) & 0xFF);
}
static void put_vlq(buf *b, uint32_t v) {
  unsigned char tmp[5];
  int n = 0;
  tmp[n++] = v & 0x7F;
  while (v >>= 7)
    tmp[n++] = (unsigned char)(0x80 | (v & 0x7F));
  while (n--)
    put8(b, tmp[n]);
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

int stg_midi_encode(const stg_midi_note *notes, size_t n, unsigned char **out, size_t *len) {
  ev *evs = malloc((2 * n + 1) * sizeof *evs);
  if (!evs)
    return ebb_seterr(EBB_ENOMEM, "midi: out of memory for %zu notes", n);
  for (size_t i = 0; i < n; i++) {
    long on = stg_midi_ticks(notes[i].onset < 0 ? 0 : notes[i].onset);
    long off = stg_midi_ticks(notes[i].offset);
    if (off <= on)
      off = on + 1;
    int key = clampi(notes[i].key, 0, 127), vel = clampi(notes[i].velocity, 1, 127);
    evs[2 * i] = (ev){on, 1, key, vel};
    evs[2 * i + 1] = (ev){off, 0, key, 0};
  }
  qsort(evs, 2 * n, sizeof *evs, ev_cmp);
  buf t = {0}, f = {0};
  static const char name[] = "ebb songtrace melody";
  put_vlq(&t, 0);
  put8(&t, 0xFF), put8(&t, 0x03), put_vlq(&t, sizeof name - 1), put(&t, name, sizeof name - 1);
  put_vlq(&t, 0);
  put8(&t, 0xFF), put8(&t, 0x51), put8(&t, 3), put_be(&t, EBB_MIDI_TEMPO_US, 3);
  put_vlq(&t, 0);
  put8(&t, 0xFF), put8(&t, 0x58), put8(&t, 4), put8(&t, 4), put8(&t, 2), put8(&t, 24), put8(&t, 8);
  long now = 0;
  for (size_t i = 0; i < 2 * n; i++) {
    put_vlq(&t, (uint32_t)(evs[i].tick - now));
    now = evs[i].tick;
    put8(&t, evs[i].on ? 0x90 : 0x80);
    put8(&t, (unsigned)evs[i].key);
    put8(&t, evs[i].on ? (unsigned)evs[i].vel : 0x40);
  }
  put_vlq(&t, 0);
  put8(&t, 0xFF), put8(&t, 0x2F), put8(&t, 0);
  free(evs);
  put(&f, "MThd", 4);
  put_be(&f, 6, 4);
  put_be(&f, 0, 2); /* format 0 */
  put_be(&f, 1, 2); /* one track */
  put_be(&f, EBB_MIDI_TPQ, 2);
  put(&f, "MTrk", 4);
  put_be(&f, (uint32_t)t.n, 4);
  put(&f, t.p, t.n);
  int oom = t.oom || f.oom;
  free(t.p);
  if (oom) {
    free(f.p);
    return ebb_seterr(EBB_ENOMEM, "midi: out of memory");
  }
  *out = f.p;
  *len = f.n;
  return 0;
}

int stg_midi_write(const char *path, const stg_midi_note *notes, size_t n) {
  unsigned char *p = NULL;
  size_t len = 0;
  int rc = stg_midi_encode(notes, n, &p, &len);
  if (rc)
    return rc;
  FILE *f = fopen(path, "wb");
  if (!f) {
    free(p);
    return ebb_seterr(EBB_EIO, "%s: cannot write", path);
  }
  int bad = fwrite(p, 1, len, f) != len;
  bad |= fclose(f) != 0;
  free(p);
  return bad ? ebb_seterr(EBB_EIO, "%s: short write", path) : 0;
}
