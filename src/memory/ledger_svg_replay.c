/* The timeline's model: the ledger's events replayed into one state per
 * pixel column (what ledger_svg.c draws). Each column keeps the moment of
 * its highest total; a column without events carries the state the last
 * event left (steps). The driver context is alive from its CTX_CREATE to its
 * CTX_RELEASE; its size is what the create recorded (measured or the
 * allocator's estimate), else what its release measured. A release whose
 * create the ring dropped means it was alive from the start of the window. */
#include <stdlib.h>
#include <string.h>

#include "memory/internal.h"
#include "memory/ledger_internal.h"

/* The replay's running state. */
typedef struct replay {
  int ctx_on;
  double ctx_b; /* context bytes while it is on */
  double res;   /* reserved after the last event */
  int last_c;   /* the last column an event fell in */
} replay;

static int is_owner_event(mem_ledger_kind k) {
  return k == EBB_EV_ALLOC || k == EBB_EV_FREE || k == EBB_EV_LEAK_FREE;
}

void mem__svg_model_free(svg_model *m) {
  free(m->slot);
  free(m->ids);
  free(m->cur);
  free(m->peak);
  free(m->colv);
  free(m->coltot);
  free(m->colres);
  free(m->colctx);
  free(m->colctxon);
  free(m->colset);
  memset(m, 0, sizeof *m);
}

static int model_alloc(svg_model *m, const ledger_snap *s, int ncols) {
  memset(m, 0, sizeof *m);
  m->s = s;
  m->ncols = ncols;
  m->stride = s->nnames + 1;
  m->slot = calloc(m->stride, sizeof *m->slot);
  m->ids = calloc(m->stride, sizeof *m->ids);
  m->cur = calloc(m->stride, sizeof *m->cur);
  m->peak = calloc(m->stride, sizeof *m->peak);
  m->colv = calloc((size_t)ncols * m->stride, sizeof *m->colv);
  m->coltot = calloc((size_t)ncols, sizeof *m->coltot);
  m->colres = calloc((size_t)ncols, sizeof *m->colres);
  m->colctx = calloc((size_t)ncols, sizeof *m->colctx);
  m->colctxon = calloc((size_t)ncols, sizeof *m->colctxon);
  m->colset = calloc((size_t)ncols, sizeof *m->colset);
  if (m->slot && m->ids && m->cur && m->peak && m->colv && m->coltot && m->colres && m->colctx &&
      m->colctxon && m->colset)
    return 0;
  mem__svg_model_free(m);
  return ebb_seterr(EBB_ENOMEM, "ledger: no host memory to draw the timeline");
}

/* A CTX_RELEASE before any CTX_CREATE: alive from the window's start. */
static void context_at_start(const ledger_snap *s, svg_model *m, replay *r) {
  for (size_t i = 0; i < s->n; i++) {
    const mem_ledger_event *e = &s->ev[i];
    if (e->kind == EBB_EV_CTX_CREATE)
      break;
    if (e->kind == EBB_EV_CTX_RELEASE) {
      r->ctx_on = m->ctx_seen = 1;
      r->ctx_b = (double)e->bytes;
      break;
    }
  }
}

/* Owners in order of appearance, the largest release and context size. */
static void scan(const ledger_snap *s, svg_model *m) {
  for (size_t i = 0; i < s->n; i++) {
    const mem_ledger_event *e = &s->ev[i];
    if (e->kind == EBB_EV_RELEASE && (double)e->bytes > m->rel_max)
      m->rel_max = (double)e->bytes;
    if (e->kind == EBB_EV_CTX_CREATE || e->kind == EBB_EV_CTX_RELEASE) {
      m->ctx_seen = 1;
      if (e->bytes)
        m->ctx_known = 1;
      if ((double)e->bytes > m->ctx_peak)
        m->ctx_peak = (double)e->bytes;
    }
    if (is_owner_event(e->kind) && e->owner_id <= s->nnames && !m->slot[e->owner_id]) {
      m->ids[m->nown] = e->owner_id;
      m->slot[e->owner_id] = (int)++m->nown;
      /* value before the first event seen (the ring may have dropped older) */
      double before =
          (double)e->owner_bytes + (e->kind == EBB_EV_ALLOC ? -(double)e->bytes : (double)e->bytes);
      m->cur[m->nown - 1] = before > 0 ? before : 0;
    }
  }
}

static int column_of(const svg_model *m, uint64_t t_ns) {
  int c = (int)((double)(t_ns - m->t_first) / m->span_ns * (m->ncols - 1));
  if (c < 0)
    c = 0;
  if (c >= m->ncols)
    c = m->ncols - 1;
  return c;
}

/* Columns after the last event's and before column c keep its state. */
static void carry_to(svg_model *m, const replay *r, int c) {
  for (int cc = r->last_c + 1; cc < c; cc++) {
    double tot = 0;
    for (size_t k = 0; k < m->nown; k++)
      tot += m->colv[(size_t)cc * m->stride + k] = m->cur[k];
    m->coltot[cc] = tot + (r->ctx_on ? r->ctx_b : 0);
    m->colctx[cc] = r->ctx_on ? r->ctx_b : 0;
    m->colctxon[cc] = r->ctx_on;
    m->colres[cc] = r->res;
    m->colset[cc] = 1;
  }
}

/* A context created without a measured size: the size its release measured. */
static double context_size_ahead(const ledger_snap *s, size_t i) {
  for (size_t j = i + 1; j < s->n; j++)
    if (s->ev[j].kind == EBB_EV_CTX_RELEASE || s->ev[j].kind == EBB_EV_CTX_CREATE)
      return s->ev[j].kind == EBB_EV_CTX_RELEASE ? (double)s->ev[j].bytes : 0;
  return 0;
}

/* Event i, which falls in column c: the owners' and context's state after
 * it, kept in the column when it is the column's fullest moment. */
static void take_event(svg_model *m, replay *r, size_t i, int c) {
  const mem_ledger_event *e = &m->s->ev[i];
  if (is_owner_event(e->kind) && e->owner_id <= m->s->nnames && m->slot[e->owner_id]) {
    int k = m->slot[e->owner_id] - 1;
    m->cur[k] = (double)e->owner_bytes;
    if (m->cur[k] > m->peak[k])
      m->peak[k] = m->cur[k];
  }
  if (e->kind == EBB_EV_CTX_CREATE) {
    r->ctx_on = 1;
    r->ctx_b = (double)e->bytes;
    if (!r->ctx_b)
      r->ctx_b = context_size_ahead(m->s, i);
  }
  r->res = (double)e->reserved;
  double tot = 0;
  for (size_t k = 0; k < m->nown; k++)
    tot += m->cur[k];
  double ctxv = r->ctx_on ? r->ctx_b : 0;
  if (!m->colset[c] || tot + ctxv >= m->coltot[c]) {
    m->coltot[c] = tot + ctxv;
    m->colctx[c] = ctxv;
    for (size_t k = 0; k < m->nown; k++)
      m->colv[(size_t)c * m->stride + k] = m->cur[k];
  }
  if (r->ctx_on)
    m->colctxon[c] = 1;
  if (!m->colset[c] || r->res > m->colres[c])
    m->colres[c] = r->res;
  m->colset[c] = 1;
  if (tot + ctxv > m->ymax)
    m->ymax = tot + ctxv;
  if (r->res + ctxv > m->ymax)
    m->ymax = r->res + ctxv;
  if (e->kind == EBB_EV_CTX_RELEASE)
    r->ctx_on = 0;
}

int mem__svg_replay(const ledger_snap *s, int ncols, svg_model *m) {
  int rc = model_alloc(m, s, ncols);
  if (rc)
    return rc;
  replay r = {.last_c = -1};
  context_at_start(s, m, &r);
  scan(s, m);
  uint64_t t_last = s->n ? s->ev[s->n - 1].t_ns : 1;
  m->t_first = s->n ? s->ev[0].t_ns : 0;
  m->span_ns = t_last > m->t_first ? (double)(t_last - m->t_first) : 1.0;
  r.res = s->n ? (double)s->ev[0].reserved : 0;
  for (size_t i = 0; i < s->n; i++) {
    int c = column_of(m, s->ev[i].t_ns);
    carry_to(m, &r, c);
    if (c > r.last_c)
      r.last_c = c;
    take_event(m, &r, i, c);
  }
  for (int c = r.last_c + 1; c < ncols && r.last_c >= 0; c++) {
    memcpy(&m->colv[(size_t)c * m->stride], &m->colv[(size_t)r.last_c * m->stride],
           m->nown * sizeof *m->colv);
    m->colres[c] = m->colres[r.last_c];
    m->colctx[c] = r.ctx_on ? m->colctx[r.last_c] : 0;
    m->colctxon[c] = r.ctx_on;
  }
  /* what was handed back must fit on the axis it is drawn against */
  if (m->rel_max > m->ymax)
    m->ymax = m->rel_max;
  if (m->ctx_peak > m->ymax)
    m->ymax = m->ctx_peak;
  return 0;
}
