/* The memory timeline as an SVG picture: the driver context as a grey band at
 * the bottom (from its create to its release event), device bytes over time
 * stacked by owner above it (one colour each, legend with peaks), reserved
 * segments as a dashed step line (above the context), release points marked
 * with the bytes handed back, marks (stage starts) as labelled ticks thinned
 * so that labels never pile up, axes in seconds and MiB/GiB. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memory/internal.h"
#include "base/text.h"
#include "memory/ledger_internal.h"

#define W 1000
#define H 520
#define ML 80  /* margins */
#define MR 230
#define MT 56
#define MB 56
#define PW (W - ML - MR)
#define PH (H - MT - MB)

/* Tableau-like, without green: green is kept for the release marks */
static const char *palette[] = {"#4e79a7", "#f28e2b", "#b07aa1", "#e15759", "#76b7b2",
                                "#edc948", "#9c755f", "#ff9da7", "#2f4b7c", "#bab0ac"};
#define NPAL (sizeof palette / sizeof *palette)


/* A "nice" tick step for a range: 1, 2 or 5 times a power of ten. */
static double nice_step(double range, int want) {
  if (range <= 0)
    return 1;
  double raw = range / want, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static int is_owner_event(ebb_ledger_kind k) {
  return k == EBB_EV_ALLOC || k == EBB_EV_FREE || k == EBB_EV_LEAK_FREE;
}

/* Rough width in px of a label (DejaVu Sans: about 0.62 em a character,
 * bold a little wider); only used to keep labels apart and inside. */
static double text_w(const char *s, double size, int bold) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    n += (*p & 0xC0) != 0x80; /* count characters, not bytes */
  return (double)n * size * (bold ? 0.66 : 0.58);
}

/* The label for the marks ev[i..j) (one cluster): their texts joined with
 * " · ", consecutive ones that share a first word merged ("align load/run"),
 * cut at a character boundary with "…" to fit maxw px at 10 px. */
static void mark_label(char *out, size_t cap, const ebb_ledger_event *ev, size_t i, size_t j,
                       double maxw) {
  size_t n = 0;
  const char *prev = NULL;
  size_t prevhead = 0;
  out[0] = 0;
  for (size_t k = i; k < j && n + 1 < cap; k++) {
    if (ev[k].kind != EBB_EV_MARK || !ev[k].label)
      continue;
    const char *t = ev[k].label;
    size_t head = strcspn(t, " ");
    int w;
    if (prev && t[head] == ' ' && head == prevhead && strncmp(t, prev, head) == 0)
      w = snprintf(out + n, cap - n, "/%s", t + head + 1);
    else
      w = snprintf(out + n, cap - n, "%s%s", n ? " \xc2\xb7 " : "", t);
    if (w < 0)
      break;
    n += (size_t)w < cap - n ? (size_t)w : cap - n - 1;
    prev = t;
    prevhead = head;
  }
  if (text_w(out, 10, 0) <= maxw)
    return;
  const char *ell = "\xe2\x80\xa6";
  size_t ne = strlen(ell);
  n = strlen(out);
  while (n > 0 && (text_w(out, 10, 0) + 10 * 0.58 > maxw || n + ne >= cap)) {
    do
      n--;
    while (n > 0 && ((unsigned char)out[n] & 0xC0) == 0x80);
    out[n] = 0;
  }
  memcpy(out + n, ell, ne + 1);
}

#define REL_ROWS 3    /* rows of release labels at the top of the plot */
#define MARK_GAP 13.0 /* px between two drawn (rotated) mark labels */

int ebb_ledger_write_svg(ebb_ledger *l, FILE *f, const char *title) {
  if (!l || !f)
    return ebb_seterr(EBB_EINVAL, "ebb_ledger_write_svg: ledger and stream are required");
  ledger_snap s;
  int rc = ledger_snapshot(l, &s);
  if (rc)
    return rc;
  /* owners that hold device memory in the window, in order of appearance */
  size_t nown = 0;
  int *slot = calloc(s.nnames + 1, sizeof *slot); /* owner id -> 1-based slot */
  uint32_t *ids = calloc(s.nnames + 1, sizeof *ids);
  double *cur = calloc(s.nnames + 1, sizeof *cur);
  double *peak = calloc(s.nnames + 1, sizeof *peak);
  int ncols = PW;
  double *colv = calloc((size_t)ncols * (s.nnames + 1), sizeof *colv);
  double *coltot = calloc((size_t)ncols, sizeof *coltot);
  double *colres = calloc((size_t)ncols, sizeof *colres);
  double *colctx = calloc((size_t)ncols, sizeof *colctx); /* context bytes drawn */
  int *colctxon = calloc((size_t)ncols, sizeof *colctxon);  /* context alive */
  int *colset = calloc((size_t)ncols, sizeof *colset);
  if (!slot || !ids || !cur || !peak || !colv || !coltot || !colres || !colctx || !colctxon ||
      !colset) {
    rc = ebb_seterr(EBB_ENOMEM, "ledger: no host memory to draw the timeline");
    goto out;
  }
  /* the context: alive from CTX_CREATE to CTX_RELEASE; its size is what
   * the create event recorded (measured or the allocator's estimate), else
   * what the release measured. A release whose create the ring dropped
   * means the context was alive from the start of the window. */
  int ctx_on = 0, ctx_seen = 0, ctx_known = 0;
  double ctx_b = 0, ctx_peak = 0, rel_max = 0;
  for (size_t i = 0; i < s.n; i++) {
    const ebb_ledger_event *e = &s.ev[i];
    if (e->kind == EBB_EV_CTX_CREATE)
      break;
    if (e->kind == EBB_EV_CTX_RELEASE) {
      ctx_on = ctx_seen = 1;
      ctx_b = (double)e->bytes;
      break;
    }
  }
  for (size_t i = 0; i < s.n; i++) {
    const ebb_ledger_event *e = &s.ev[i];
    if (e->kind == EBB_EV_RELEASE && (double)e->bytes > rel_max)
      rel_max = (double)e->bytes;
    if (e->kind == EBB_EV_CTX_CREATE || e->kind == EBB_EV_CTX_RELEASE) {
      ctx_seen = 1;
      if (e->bytes)
        ctx_known = 1;
      if ((double)e->bytes > ctx_peak)
        ctx_peak = (double)e->bytes;
    }
    if (is_owner_event(e->kind) && e->owner_id <= s.nnames && !slot[e->owner_id]) {
      ids[nown] = e->owner_id;
      slot[e->owner_id] = (int)++nown;
      /* value before the first event seen (the ring may have dropped older) */
      double before = (double)e->owner_bytes +
                      (e->kind == EBB_EV_ALLOC ? -(double)e->bytes : (double)e->bytes);
      cur[nown - 1] = before > 0 ? before : 0;
    }
  }
  uint64_t t_first = s.n ? s.ev[0].t_ns : 0, t_last = s.n ? s.ev[s.n - 1].t_ns : 1;
  double span_ns = t_last > t_first ? (double)(t_last - t_first) : 1.0;
  double ymax = 0, res = s.n ? (double)s.ev[0].reserved : 0;
  /* replay: per pixel column keep the moment of highest total; columns
   * without events carry the state left by the last event (steps) */
  int last_c = -1;
  for (size_t i = 0; i < s.n; i++) {
    const ebb_ledger_event *e = &s.ev[i];
    int c = (int)((double)(e->t_ns - t_first) / span_ns * (ncols - 1));
    if (c < 0)
      c = 0;
    if (c >= ncols)
      c = ncols - 1;
    for (int cc = last_c + 1; cc < c; cc++) {
      double tot = 0;
      for (size_t k = 0; k < nown; k++)
        tot += colv[(size_t)cc * (s.nnames + 1) + k] = cur[k];
      coltot[cc] = tot + (ctx_on ? ctx_b : 0);
      colctx[cc] = ctx_on ? ctx_b : 0;
      colctxon[cc] = ctx_on;
      colres[cc] = res;
      colset[cc] = 1;
    }
    if (c > last_c)
      last_c = c;
    if (is_owner_event(e->kind) && e->owner_id <= s.nnames && slot[e->owner_id]) {
      int k = slot[e->owner_id] - 1;
      cur[k] = (double)e->owner_bytes;
      if (cur[k] > peak[k])
        peak[k] = cur[k];
    }
    if (e->kind == EBB_EV_CTX_CREATE) {
      ctx_on = 1;
      ctx_b = (double)e->bytes;
      /* not measured at create: the size its release measured, if any */
      for (size_t j = i + 1; !ctx_b && j < s.n; j++)
        if (s.ev[j].kind == EBB_EV_CTX_RELEASE || s.ev[j].kind == EBB_EV_CTX_CREATE) {
          if (s.ev[j].kind == EBB_EV_CTX_RELEASE)
            ctx_b = (double)s.ev[j].bytes;
          break;
        }
    }
    int ctx_was = ctx_on;
    res = (double)e->reserved;
    double tot = 0;
    for (size_t k = 0; k < nown; k++)
      tot += cur[k];
    double ctxv = ctx_on ? ctx_b : 0;
    if (!colset[c] || tot + ctxv >= coltot[c]) {
      coltot[c] = tot + ctxv;
      colctx[c] = ctxv;
      for (size_t k = 0; k < nown; k++)
        colv[(size_t)c * (s.nnames + 1) + k] = cur[k];
    }
    if (ctx_was)
      colctxon[c] = 1;
    if (!colset[c] || res > colres[c])
      colres[c] = res;
    colset[c] = 1;
    if (tot + ctxv > ymax)
      ymax = tot + ctxv;
    if (res + ctxv > ymax)
      ymax = res + ctxv;
    if (e->kind == EBB_EV_CTX_RELEASE)
      ctx_on = 0;
  }
  for (int c = last_c + 1; c < ncols && last_c >= 0; c++) {
    memcpy(&colv[(size_t)c * (s.nnames + 1)], &colv[(size_t)last_c * (s.nnames + 1)],
           nown * sizeof *colv);
    colres[c] = colres[last_c];
    colctx[c] = ctx_on ? colctx[last_c] : 0;
    colctxon[c] = ctx_on;
  }
  /* what was handed back must fit on the axis it is drawn against */
  if (rel_max > ymax)
    ymax = rel_max;
  if (ctx_peak > ymax)
    ymax = ctx_peak;

  int gib = ymax >= 2.0 * (1 << 30);
  double unit = gib ? (double)(1 << 30) : (double)(1 << 20);
  const char *uname = gib ? "GiB" : "MiB";
  double ytop_u = ymax / unit;
  double ystep = nice_step(ytop_u > 0 ? ytop_u : 1, 5);
  double ytop = ceil((ytop_u > 0 ? ytop_u : 1) / ystep - 1e-9) * ystep;
  int ms = span_ns < 1e9;
  double tunit = ms ? 1e6 : 1e9;
  double tspan = span_ns / tunit, tstep = nice_step(tspan, 8);
#define X_(col) (ML + (double)(col) * PW / (ncols - 1))
#define XT_(t_ns) (ML + ((double)((t_ns) - t_first)) / span_ns * PW)
#define Y_(v) (MT + PH - (v) / unit / ytop * PH)
  /* an unknown context size is drawn as a thin strip that has no scale */
  double ctx_strip = ctx_known ? 0 : 5.0;

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
          W, H, W, H);
  fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", W, H);
  fprintf(f, "<text x=\"%d\" y=\"26\" font-size=\"17\" font-weight=\"bold\" fill=\"#222\">", ML);
  if (title)
    ebb_write_xml_text(f, title);
  else {
    fputs("Device memory on ", f);
    ebb_write_xml_text(f, s.device);
  }
  fprintf(f, "</text>\n<text x=\"%d\" y=\"44\" font-size=\"11\" fill=\"#666\">"
             "%scoloured: live blocks by owner; dashed: reserved segments; "
             "green: handed back to the driver%s</text>\n",
          ML, ctx_seen ? "grey: driver context; " : "",
          s.dropped ? " (oldest events dropped by the ring)" : "");
  /* grid and y axis (tick values from an index: no drift from adding) */
  int nyt = (int)floor(ytop / ystep + 0.5);
  for (int i = 0; i <= nyt; i++) {
    double v = i * ystep;
    double y = MT + PH - v / ytop * PH;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", ML,
            y, ML + PW, y);
    fprintf(f, "<text class=\"ytick\" x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\" "
               "fill=\"#444\">%g</text>\n",
            ML - 6, y + 4, v);
  }
  fprintf(f, "<text transform=\"translate(18 %d) rotate(-90)\" font-size=\"12\" "
             "text-anchor=\"middle\" fill=\"#333\">device memory (%s)</text>\n",
          MT + PH / 2, uname);
  /* x axis */
  for (int i = 0;; i++) {
    double t = i * tstep;
    if (t > tspan + tstep / 2)
      break;
    double x = ML + t / (tspan > 0 ? tspan : 1) * PW;
    if (x > ML + PW + 0.5)
      break;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#999\"/>\n", x,
            MT + PH, x, MT + PH + 5);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\" fill=\"#444\">%g</text>\n",
            x, MT + PH + 18, t);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" fill=\"#333\">"
             "time (%s)</text>\n",
          ML + PW / 2, H - 12, ms ? "ms" : "s");

  /* the context: one band per stretch it was alive, at the bottom */
  if (ctx_seen) {
    for (int c = 0; c < ncols;) {
      if (!colctxon[c]) {
        c++;
        continue;
      }
      int c0 = c;
      while (c < ncols && colctxon[c])
        c++;
      fprintf(f, "<path class=\"context-band\" fill=\"#b4b4b4\" stroke=\"#8c8c8c\" "
                 "stroke-width=\"0.6\" d=\"");
      for (int cc = c0; cc < c; cc++) {
        double y = ctx_strip ? MT + PH - ctx_strip : Y_(colctx[cc]);
        fprintf(f, "%s%.1f %.1f", cc > c0 ? " L" : "M", X_(cc), y);
      }
      fprintf(f, " L%.1f %d L%.1f %d Z\"/>\n", X_(c - 1), MT + PH, X_(c0), MT + PH);
      /* its label inside the band where there is room, else just above */
      double bh = ctx_strip ? ctx_strip : MT + PH - Y_(colctx[c0]);
      const char *lab = ctx_strip ? "context (size unknown)" : "context";
      double wpx = X_(c - 1) - X_(c0);
      if (wpx >= text_w(lab, 11, 0) + 8) {
        double ly = bh >= 16 ? MT + PH - bh / 2 + 4 : MT + PH - bh - 4;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#333\" stroke=\"#fff\" "
                   "stroke-width=\"%s\" paint-order=\"stroke\">%s</text>\n",
                X_(c0) + 16, ly, bh >= 16 ? "0" : "3", lab);
      }
    }
  }
  /* stacked areas, one path per owner, on top of the context */
  for (size_t k = 0; k < nown; k++) {
    fprintf(f, "<path fill=\"%s\" fill-opacity=\"0.85\" stroke=\"none\" d=\"",
            palette[k % NPAL]);
    for (int c = 0; c < ncols; c++) {
      double lo = colctx[c];
      for (size_t j = 0; j < k; j++)
        lo += colv[(size_t)c * (s.nnames + 1) + j];
      double hi = lo + colv[(size_t)c * (s.nnames + 1) + k];
      fprintf(f, "%s%.1f %.1f", c ? " L" : "M", X_(c), Y_(hi));
    }
    for (int c = ncols - 1; c >= 0; c--) {
      double lo = colctx[c];
      for (size_t j = 0; j < k; j++)
        lo += colv[(size_t)c * (s.nnames + 1) + j];
      fprintf(f, " L%.1f %.1f", X_(c), Y_(lo));
    }
    fprintf(f, " Z\"/>\n");
  }
  /* reserved: dashed step line, above the context like the blocks in it */
  if (s.n) {
    fprintf(f, "<path fill=\"none\" stroke=\"#222\" stroke-width=\"1.4\" stroke-dasharray=\"5 3\" d=\"");
    for (int c = 0; c < ncols; c++)
      fprintf(f, "%s%.1f %.1f", c ? " L" : "M", X_(c), Y_(colres[c] + colctx[c]));
    fprintf(f, "\"/>\n");
  }
  /* releases: a green line and arrow each; labels in REL_ROWS rows at the
   * top, each in the first row where it does not touch the previous one,
   * turned to the left of its line near the right edge, skipped (line kept)
   * when no row has room */
  double row_end[REL_ROWS];
  for (int r = 0; r < REL_ROWS; r++)
    row_end[r] = -1e9;
  int rows_used = 0;
  for (size_t i = 0; i < s.n; i++) {
    const ebb_ledger_event *e = &s.ev[i];
    if (e->kind != EBB_EV_RELEASE || !e->bytes)
      continue;
    double x = XT_(e->t_ns);
    char b[32], lab[48];
    mem_fmt_bytes(b, sizeof b, e->bytes);
    snprintf(lab, sizeof lab, "released %s", b);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#1b7a1b\" "
               "stroke-width=\"1.5\"/>\n",
            x, MT, x, MT + PH);
    fprintf(f, "<polygon points=\"%.1f,%d %.1f,%d %.1f,%d\" fill=\"#1b7a1b\"/>\n", x - 5,
            MT + PH, x + 5, MT + PH, x, MT + PH - 8);
    double w = text_w(lab, 11, 1);
    double x0 = x + 4; /* left end of the label */
    if (x0 + w > ML + PW - 2)
      x0 = x - 4 - w;
    if (x0 < ML + 2)
      x0 = ML + 2;
    int row = -1;
    for (int r = 0; r < REL_ROWS && row < 0; r++)
      if (x0 > row_end[r] + 6)
        row = r;
    if (row < 0)
      continue;
    row_end[row] = x0 + w;
    if (row + 1 > rows_used)
      rows_used = row + 1;
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#1b7a1b\" font-weight=\"bold\" "
               "stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\">%s</text>\n",
            x0, MT + 14 + 14 * row, lab);
  }
  /* marks: a dotted line each; rotated labels below the release rows, one
   * per cluster of marks closer than MARK_GAP px to the cluster's first
   * (mark_label joins their texts) */
  {
    int mtop = MT + 4 + 14 * rows_used + (rows_used ? 4 : 0);
    size_t i = 0;
    while (i < s.n) {
      const ebb_ledger_event *e = &s.ev[i];
      if (e->kind != EBB_EV_MARK) {
        i++;
        continue;
      }
      double x = XT_(e->t_ns);
      size_t j = i + 1;
      for (; j < s.n; j++) {
        if (s.ev[j].kind != EBB_EV_MARK)
          continue;
        if (XT_(s.ev[j].t_ns) - x >= MARK_GAP)
          break;
      }
      /* lines for the whole cluster, one label for it */
      for (size_t k = i; k < j; k++)
        if (s.ev[k].kind == EBB_EV_MARK)
          fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#777\" "
                     "stroke-dasharray=\"2 3\"/>\n",
                  XT_(s.ev[k].t_ns), MT, XT_(s.ev[k].t_ns), MT + PH);
      char lab[512];
      mark_label(lab, sizeof lab, s.ev, i, j, (double)(MT + PH - mtop - 6));
      double lx = x + 11 > ML + PW - 2 ? x - 3 : x + 11;
      fprintf(f, "<text class=\"mark\" transform=\"translate(%.1f %d) rotate(-90)\" "
                 "font-size=\"10\" text-anchor=\"end\" fill=\"#555\" stroke=\"#fff\" "
                 "stroke-width=\"3\" paint-order=\"stroke\">",
              lx, mtop);
      ebb_write_xml_text(f, lab);
      fprintf(f, "</text>\n");
      i = j;
    }
  }
  /* frame */
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n",
          ML, MT, PW, PH);
  /* legend */
  int lx = ML + PW + 18, ly = MT + 6;
  fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" font-weight=\"bold\" fill=\"#333\">owner (peak)</text>\n",
          lx, ly + 4);
  for (size_t k = 0; k < nown && k < 24; k++) {
    int y = ly + 20 + (int)k * 19;
    char b[32];
    mem_fmt_bytes(b, sizeof b, (uint64_t)peak[k]);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"13\" height=\"13\" fill=\"%s\"/>\n", lx, y - 10,
            palette[k % NPAL]);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">", lx + 19, y);
    ebb_write_xml_text(f, ids[k] < s.nnames && s.names[ids[k]] ? s.names[ids[k]] : "?");
    fprintf(f, " (%s)</text>\n", b);
  }
  if (nown > 24)
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#666\">... %zu more</text>\n", lx,
            ly + 20 + 24 * 19, nown - 24);
  {
    int y = ly + 20 + (int)(nown < 24 ? nown : 25) * 19 + 10;
    if (ctx_seen) {
      char b[32] = "size unknown";
      if (ctx_known)
        mem_fmt_bytes(b, sizeof b, (uint64_t)ctx_peak);
      fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"13\" height=\"13\" fill=\"#b4b4b4\" "
                 "stroke=\"#8c8c8c\" stroke-width=\"0.6\"/>\n",
              lx, y - 10);
      fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">context (%s)</text>\n",
              lx + 19, y, b);
      y += 19;
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#222\" stroke-width=\"1.4\" "
               "stroke-dasharray=\"5 3\"/>\n",
            lx, y - 4, lx + 13, y - 4);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">reserved</text>\n", lx + 19,
            y);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"3\" height=\"13\" fill=\"#1b7a1b\"/>\n", lx + 5,
            y + 9);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">release</text>\n", lx + 19,
            y + 19);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#777\" "
               "stroke-dasharray=\"2 3\"/>\n",
            lx + 6, y + 28, lx + 6, y + 41);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">mark</text>\n", lx + 19,
            y + 38);
  }
  if (!s.n)
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\" text-anchor=\"middle\" fill=\"#888\">no "
               "events recorded</text>\n",
            ML + PW / 2, MT + PH / 2);
  fprintf(f, "</svg>\n");
  if (ferror(f))
    rc = ebb_seterr(EBB_EIO, "ledger: writing SVG failed");
out:
  free(slot);
  free(ids);
  free(cur);
  free(peak);
  free(colv);
  free(coltot);
  free(colres);
  free(colctx);
  free(colctxon);
  free(colset);
  ledger_snap_free(&s);
  return rc;
}
