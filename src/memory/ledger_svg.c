/* The memory timeline as an SVG picture: device bytes over time stacked by
 * owner (one colour each, legend with peaks), reserved as a dashed step line,
 * release points marked with the bytes handed back, marks (stage starts) as
 * labelled ticks, axes in seconds and MiB/GiB. */
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
  int *colset = calloc((size_t)ncols, sizeof *colset);
  if (!slot || !ids || !cur || !peak || !colv || !coltot || !colres || !colset) {
    rc = ebb_seterr(EBB_ENOMEM, "ledger: no host memory to draw the timeline");
    goto out;
  }
  for (size_t i = 0; i < s.n; i++) {
    const ebb_ledger_event *e = &s.ev[i];
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
  /* replay: per pixel column keep the moment of highest allocation; columns
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
      coltot[cc] = tot;
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
    res = (double)e->reserved;
    double tot = 0;
    for (size_t k = 0; k < nown; k++)
      tot += cur[k];
    if (!colset[c] || tot >= coltot[c]) {
      coltot[c] = tot;
      for (size_t k = 0; k < nown; k++)
        colv[(size_t)c * (s.nnames + 1) + k] = cur[k];
    }
    if (!colset[c] || res > colres[c])
      colres[c] = res;
    colset[c] = 1;
    if (tot > ymax)
      ymax = tot;
    if (res > ymax)
      ymax = res;
  }
  for (int c = last_c + 1; c < ncols && last_c >= 0; c++) {
    memcpy(&colv[(size_t)c * (s.nnames + 1)], &colv[(size_t)last_c * (s.nnames + 1)],
           nown * sizeof *colv);
    colres[c] = colres[last_c];
  }

  int gib = ymax >= 4.0 * (1 << 30);
  double unit = gib ? (double)(1 << 30) : (double)(1 << 20);
  const char *uname = gib ? "GiB" : "MiB";
  double ytop_u = ymax / unit;
  double ystep = nice_step(ytop_u > 0 ? ytop_u : 1, 5);
  double ytop = ceil((ytop_u > 0 ? ytop_u : 1) / ystep) * ystep;
  int ms = span_ns < 2e9;
  double tunit = ms ? 1e6 : 1e9;
  double tspan = span_ns / tunit, tstep = nice_step(tspan, 8);
#define X_(col) (ML + (double)(col) * PW / (ncols - 1))
#define XT_(t_ns) (ML + ((double)((t_ns) - t_first)) / span_ns * PW)
#define Y_(v) (MT + PH - (v) / unit / ytop * PH)

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
             "bytes in live blocks, stacked by owner; dashed: reserved from the driver; "
             "green: memory handed back%s</text>\n",
          ML, s.dropped ? " (oldest events dropped by the ring)" : "");
  /* grid and y axis */
  for (double v = 0; v <= ytop + ystep / 2; v += ystep) {
    double y = MT + PH - v / ytop * PH;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", ML,
            y, ML + PW, y);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\" fill=\"#444\">%g</text>\n",
            ML - 6, y + 4, v);
  }
  fprintf(f, "<text transform=\"translate(18 %d) rotate(-90)\" font-size=\"12\" "
             "text-anchor=\"middle\" fill=\"#333\">device memory (%s)</text>\n",
          MT + PH / 2, uname);
  /* x axis */
  for (double t = 0; t <= tspan + tstep / 2; t += tstep) {
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

  /* stacked areas, one path per owner */
  for (size_t k = 0; k < nown; k++) {
    fprintf(f, "<path fill=\"%s\" fill-opacity=\"0.85\" stroke=\"none\" d=\"",
            palette[k % NPAL]);
    for (int c = 0; c < ncols; c++) {
      double lo = 0;
      for (size_t j = 0; j < k; j++)
        lo += colv[(size_t)c * (s.nnames + 1) + j];
      double hi = lo + colv[(size_t)c * (s.nnames + 1) + k];
      fprintf(f, "%s%.1f %.1f", c ? " L" : "M", X_(c), Y_(hi));
    }
    for (int c = ncols - 1; c >= 0; c--) {
      double lo = 0;
      for (size_t j = 0; j < k; j++)
        lo += colv[(size_t)c * (s.nnames + 1) + j];
      fprintf(f, " L%.1f %.1f", X_(c), Y_(lo));
    }
    fprintf(f, " Z\"/>\n");
  }
  /* reserved: dashed step line */
  if (s.n) {
    fprintf(f, "<path fill=\"none\" stroke=\"#222\" stroke-width=\"1.4\" stroke-dasharray=\"5 3\" d=\"");
    for (int c = 0; c < ncols; c++)
      fprintf(f, "%s%.1f %.1f", c ? " L" : "M", X_(c), Y_(colres[c]));
    fprintf(f, "\"/>\n");
  }
  /* marks and releases */
  int nrel = 0;
  for (size_t i = 0; i < s.n; i++) {
    const ebb_ledger_event *e = &s.ev[i];
    double x = XT_(e->t_ns);
    if (e->kind == EBB_EV_MARK) {
      fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#777\" "
                 "stroke-dasharray=\"2 3\"/>\n",
              x, MT, x, MT + PH);
      fprintf(f, "<text transform=\"translate(%.1f %d) rotate(-90)\" font-size=\"10\" "
                 "text-anchor=\"end\" fill=\"#555\">",
              x + 11, MT + 4);
      ebb_write_xml_text(f, e->label);
      fprintf(f, "</text>\n");
    } else if (e->kind == EBB_EV_RELEASE && e->bytes) {
      double y = MT + 14 + 14 * (nrel++ % 3);
      char b[32];
      mem_fmt_bytes(b, sizeof b, e->bytes);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#1b7a1b\" "
                 "stroke-width=\"1.5\"/>\n",
              x, MT, x, MT + PH);
      fprintf(f, "<polygon points=\"%.1f,%d %.1f,%d %.1f,%d\" fill=\"#1b7a1b\"/>\n", x - 5,
              MT + PH, x + 5, MT + PH, x, MT + PH - 8);
      /* labels near the right edge go to the left of their line */
      int left = x > ML + PW - 130;
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#1b7a1b\" "
                 "font-weight=\"bold\" text-anchor=\"%s\">released %s</text>\n",
              left ? x - 4 : x + 4, y, left ? "end" : "start", b);
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
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#222\" stroke-width=\"1.4\" "
               "stroke-dasharray=\"5 3\"/>\n",
            lx, y - 4, lx + 13, y - 4);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">reserved</text>\n", lx + 19,
            y);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"3\" height=\"13\" fill=\"#1b7a1b\"/>\n", lx + 5,
            y + 9);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">release</text>\n", lx + 19,
            y + 19);
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
  free(colset);
  ledger_snap_free(&s);
  return rc;
}
