/* The memory timeline as an SVG picture: the driver context as a grey band at
 * the bottom (from its create to its release event), device bytes over time
 * stacked by owner above it (one colour each, legend with peaks), reserved
 * segments as a dashed step line (above the context), release points marked
 * with the bytes handed back, marks (stage starts) as labelled ticks thinned
 * so that labels never pile up, axes in seconds and MiB/GiB. The events are
 * replayed into pixel columns by ledger_svg_replay.c; this file draws them,
 * one function per part of the picture. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "memory/internal.h"
#include "memory/ledger_internal.h"

#define W 1000
#define H 520
#define ML 80 /* margins */
#define MR 230
#define MT 56
#define MB 56
#define PW (W - ML - MR)
#define PH (H - MT - MB)
#define REL_ROWS 3       /* rows of release labels at the top of the plot */
#define MARK_GAP 13.0    /* px between two drawn (rotated) mark labels */
#define LEGEND_OWNERS 24 /* owners listed by name in the legend */

/* Tableau-like, without green: green is kept for the release marks */
static const char *palette[] = {"#4e79a7", "#f28e2b", "#b07aa1", "#e15759", "#76b7b2",
                                "#edc948", "#9c755f", "#ff9da7", "#2f4b7c", "#bab0ac"};
#define NPAL (sizeof palette / sizeof *palette)

/* What every part of the picture draws against: the model and the scales. */
typedef struct plot {
  FILE *f;
  const ledger_snap *s;
  const svg_model *m;
  double unit; /* bytes per y unit (MiB or GiB) */
  const char *uname;
  double ytop, ystep;  /* y axis top and tick step, in units */
  int ms;              /* time in ms (else s) */
  double tspan, tstep; /* time span and tick step, in ms or s */
  double ctx_strip;    /* > 0: context size unknown, drawn as a strip this high */
} plot;

/* Pixel x of a column, of a time; pixel y of a byte count. */
static double x_col(const plot *p, int col) { return ML + (double)(col)*PW / (p->m->ncols - 1); }
static double x_time(const plot *p, uint64_t t_ns) {
  return ML + ((double)(t_ns - p->m->t_first)) / p->m->span_ns * PW;
}
static double y_bytes(const plot *p, double v) { return MT + PH - (v) / p->unit / p->ytop * PH; }

/* A "nice" tick step for a range: 1, 2 or 5 times a power of ten. */
static double nice_step(double range, int want) {
  if (range <= 0)
    return 1;
  double raw = range / want, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
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
static void mark_label(char *out, size_t cap, const mem_ledger_event *ev, size_t i, size_t j,
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

static void set_scales(plot *p) {
  const svg_model *m = p->m;
  int gib = m->ymax >= 2.0 * (1 << 30);
  p->unit = gib ? (double)(1 << 30) : (double)(1 << 20);
  p->uname = gib ? "GiB" : "MiB";
  double ytop_u = m->ymax / p->unit;
  p->ystep = nice_step(ytop_u > 0 ? ytop_u : 1, 5);
  p->ytop = ceil((ytop_u > 0 ? ytop_u : 1) / p->ystep - 1e-9) * p->ystep;
  p->ms = m->span_ns < 1e9;
  double tunit = p->ms ? 1e6 : 1e9;
  p->tspan = m->span_ns / tunit;
  p->tstep = nice_step(p->tspan, 8);
  /* an unknown context size is drawn as a thin strip that has no scale */
  p->ctx_strip = m->ctx_known ? 0 : 5.0;
}

static void draw_head(const plot *p, const char *title) {
  FILE *f = p->f;
  fprintf(f,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
          W, H, W, H);
  fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", W, H);
  fprintf(f, "<text x=\"%d\" y=\"26\" font-size=\"17\" font-weight=\"bold\" fill=\"#222\">", ML);
  if (title)
    base_write_xml_text(f, title);
  else {
    fputs("Device memory on ", f);
    base_write_xml_text(f, p->s->device);
  }
  fprintf(f,
          "</text>\n<text x=\"%d\" y=\"44\" font-size=\"11\" fill=\"#666\">"
          "%scoloured: live blocks by owner; dashed: reserved segments; "
          "green: handed back to the driver%s</text>\n",
          ML, p->m->ctx_seen ? "grey: driver context; " : "",
          p->s->dropped ? " (oldest events dropped by the ring)" : "");
}

/* Grid and y axis (tick values from an index: no drift from adding), then
 * the x axis. */
static void draw_axes(const plot *p) {
  FILE *f = p->f;
  int nyt = (int)floor(p->ytop / p->ystep + 0.5);
  for (int i = 0; i <= nyt; i++) {
    double v = i * p->ystep;
    double y = MT + PH - v / p->ytop * PH;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", ML, y,
            ML + PW, y);
    fprintf(f,
            "<text class=\"ytick\" x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\" "
            "fill=\"#444\">%g</text>\n",
            ML - 6, y + 4, v);
  }
  fprintf(f,
          "<text transform=\"translate(18 %d) rotate(-90)\" font-size=\"12\" "
          "text-anchor=\"middle\" fill=\"#333\">device memory (%s)</text>\n",
          MT + PH / 2, p->uname);
  for (int i = 0;; i++) {
    double t = i * p->tstep;
    if (t > p->tspan + p->tstep / 2)
      break;
    double x = ML + t / (p->tspan > 0 ? p->tspan : 1) * PW;
    if (x > ML + PW + 0.5)
      break;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#999\"/>\n", x, MT + PH,
            x, MT + PH + 5);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\" "
            "fill=\"#444\">%g</text>\n",
            x, MT + PH + 18, t);
  }
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" fill=\"#333\">"
          "time (%s)</text>\n",
          ML + PW / 2, H - 12, p->ms ? "ms" : "s");
}

/* One stretch [c0, c) of columns where the context was alive: the band and
 * its label, inside the band where there is room, else just above. */
static void draw_context_band(const plot *p, int c0, int c) {
  FILE *f = p->f;
  const svg_model *m = p->m;
  fprintf(f, "<path class=\"context-band\" fill=\"#b4b4b4\" stroke=\"#8c8c8c\" "
             "stroke-width=\"0.6\" d=\"");
  for (int cc = c0; cc < c; cc++) {
    double y = p->ctx_strip ? MT + PH - p->ctx_strip : y_bytes(p, m->colctx[cc]);
    fprintf(f, "%s%.1f %.1f", cc > c0 ? " L" : "M", x_col(p, cc), y);
  }
  fprintf(f, " L%.1f %d L%.1f %d Z\"/>\n", x_col(p, c - 1), MT + PH, x_col(p, c0), MT + PH);
  double bh = p->ctx_strip ? p->ctx_strip : MT + PH - y_bytes(p, m->colctx[c0]);
  const char *lab = p->ctx_strip ? "context (size unknown)" : "context";
  double wpx = x_col(p, c - 1) - x_col(p, c0);
  if (wpx >= text_w(lab, 11, 0) + 8) {
    double ly = bh >= 16 ? MT + PH - bh / 2 + 4 : MT + PH - bh - 4;
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#333\" stroke=\"#fff\" "
            "stroke-width=\"%s\" paint-order=\"stroke\">%s</text>\n",
            x_col(p, c0) + 16, ly, bh >= 16 ? "0" : "3", lab);
  }
}

/* The context: one band per stretch it was alive, at the bottom. */
static void draw_context(const plot *p) {
  const svg_model *m = p->m;
  if (!m->ctx_seen)
    return;
  for (int c = 0; c < m->ncols;) {
    if (!m->colctxon[c]) {
      c++;
      continue;
    }
    int c0 = c;
    while (c < m->ncols && m->colctxon[c])
      c++;
    draw_context_band(p, c0, c);
  }
}

/* Bytes under owner k in column c: the context and the owners before k. */
static double below_owner(const svg_model *m, int c, size_t k) {
  double lo = m->colctx[c];
  for (size_t j = 0; j < k; j++)
    lo += m->colv[(size_t)c * m->stride + j];
  return lo;
}

/* Stacked areas, one path per owner, on top of the context. */
static void draw_owners(const plot *p) {
  FILE *f = p->f;
  const svg_model *m = p->m;
  for (size_t k = 0; k < m->nown; k++) {
    fprintf(f, "<path fill=\"%s\" fill-opacity=\"0.85\" stroke=\"none\" d=\"", palette[k % NPAL]);
    for (int c = 0; c < m->ncols; c++) {
      double hi = below_owner(m, c, k) + m->colv[(size_t)c * m->stride + k];
      fprintf(f, "%s%.1f %.1f", c ? " L" : "M", x_col(p, c), y_bytes(p, hi));
    }
    for (int c = m->ncols - 1; c >= 0; c--)
      fprintf(f, " L%.1f %.1f", x_col(p, c), y_bytes(p, below_owner(m, c, k)));
    fprintf(f, " Z\"/>\n");
  }
}

/* Reserved: dashed step line, above the context like the blocks in it. */
static void draw_reserved(const plot *p) {
  FILE *f = p->f;
  const svg_model *m = p->m;
  if (!p->s->n)
    return;
  fprintf(f,
          "<path fill=\"none\" stroke=\"#222\" stroke-width=\"1.4\" stroke-dasharray=\"5 3\" d=\"");
  for (int c = 0; c < m->ncols; c++)
    fprintf(f, "%s%.1f %.1f", c ? " L" : "M", x_col(p, c), y_bytes(p, m->colres[c] + m->colctx[c]));
  fprintf(f, "\"/>\n");
}

/* One release at x: a green line and arrow, and its label in the first of
 * the REL_ROWS rows at the top where it does not touch the previous one,
 * turned to the left of its line near the right edge, skipped (line kept)
 * when no row has room. Answers the row used, or -1. */
static int draw_release(const plot *p, double x, uint64_t bytes, double *row_end) {
  FILE *f = p->f;
  char b[32], lab[48];
  base_fmt_size(b, sizeof b, bytes);
  snprintf(lab, sizeof lab, "released %s", b);
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#1b7a1b\" "
          "stroke-width=\"1.5\"/>\n",
          x, MT, x, MT + PH);
  fprintf(f, "<polygon points=\"%.1f,%d %.1f,%d %.1f,%d\" fill=\"#1b7a1b\"/>\n", x - 5, MT + PH,
          x + 5, MT + PH, x, MT + PH - 8);
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
    return -1;
  row_end[row] = x0 + w;
  fprintf(f,
          "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#1b7a1b\" font-weight=\"bold\" "
          "stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\">%s</text>\n",
          x0, MT + 14 + 14 * row, lab);
  return row;
}

/* Every release that handed bytes back; answers the label rows used. */
static int draw_releases(const plot *p) {
  double row_end[REL_ROWS];
  for (int r = 0; r < REL_ROWS; r++)
    row_end[r] = -1e9;
  int rows_used = 0;
  for (size_t i = 0; i < p->s->n; i++) {
    const mem_ledger_event *e = &p->s->ev[i];
    if (e->kind != EBB_EV_RELEASE || !e->bytes)
      continue;
    int row = draw_release(p, x_time(p, e->t_ns), e->bytes, row_end);
    if (row + 1 > rows_used)
      rows_used = row + 1;
  }
  return rows_used;
}

/* The marks ev[i..j) closer than MARK_GAP px to ev[i]: a dotted line each
 * and one rotated label for them all (mark_label joins their texts), its
 * top at mtop. */
static void draw_mark_cluster(const plot *p, size_t i, size_t j, int mtop) {
  FILE *f = p->f;
  const mem_ledger_event *ev = p->s->ev;
  for (size_t k = i; k < j; k++)
    if (ev[k].kind == EBB_EV_MARK)
      fprintf(f,
              "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#777\" "
              "stroke-dasharray=\"2 3\"/>\n",
              x_time(p, ev[k].t_ns), MT, x_time(p, ev[k].t_ns), MT + PH);
  char lab[512];
  mark_label(lab, sizeof lab, ev, i, j, (double)(MT + PH - mtop - 6));
  double x = x_time(p, ev[i].t_ns);
  double lx = x + 11 > ML + PW - 2 ? x - 3 : x + 11;
  fprintf(f,
          "<text class=\"mark\" transform=\"translate(%.1f %d) rotate(-90)\" "
          "font-size=\"10\" text-anchor=\"end\" fill=\"#555\" stroke=\"#fff\" "
          "stroke-width=\"3\" paint-order=\"stroke\">",
          lx, mtop);
  base_write_xml_text(f, lab);
  fprintf(f, "</text>\n");
}

/* Marks in clusters, their labels below the release rows. */
static void draw_marks(const plot *p, int rows_used) {
  const ledger_snap *s = p->s;
  int mtop = MT + 4 + 14 * rows_used + (rows_used ? 4 : 0);
  size_t i = 0;
  while (i < s->n) {
    if (s->ev[i].kind != EBB_EV_MARK) {
      i++;
      continue;
    }
    double x = x_time(p, s->ev[i].t_ns);
    size_t j = i + 1;
    for (; j < s->n; j++) {
      if (s->ev[j].kind != EBB_EV_MARK)
        continue;
      if (x_time(p, s->ev[j].t_ns) - x >= MARK_GAP)
        break;
    }
    draw_mark_cluster(p, i, j, mtop);
    i = j;
  }
}

/* The legend's owners with their peaks (the first LEGEND_OWNERS of them). */
static void draw_legend_owners(const plot *p, int lx, int ly) {
  FILE *f = p->f;
  const svg_model *m = p->m;
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" font-size=\"12\" font-weight=\"bold\" fill=\"#333\">owner "
          "(peak)</text>\n",
          lx, ly + 4);
  for (size_t k = 0; k < m->nown && k < LEGEND_OWNERS; k++) {
    int y = ly + 20 + (int)k * 19;
    char b[32];
    base_fmt_size(b, sizeof b, (uint64_t)m->peak[k]);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"13\" height=\"13\" fill=\"%s\"/>\n", lx, y - 10,
            palette[k % NPAL]);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">", lx + 19, y);
    uint32_t id = m->ids[k];
    base_write_xml_text(f, id < p->s->nnames && p->s->names[id] ? p->s->names[id] : "?");
    fprintf(f, " (%s)</text>\n", b);
  }
  if (m->nown > LEGEND_OWNERS)
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#666\">... %zu more</text>\n", lx,
            ly + 20 + LEGEND_OWNERS * 19, m->nown - LEGEND_OWNERS);
}

/* The legend's keys below the owners, from y: context, reserved, release,
 * mark. */
static void draw_legend_keys(const plot *p, int lx, int y) {
  FILE *f = p->f;
  if (p->m->ctx_seen) {
    char b[32] = "size unknown";
    if (p->m->ctx_known)
      base_fmt_size(b, sizeof b, (uint64_t)p->m->ctx_peak);
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"13\" height=\"13\" fill=\"#b4b4b4\" "
            "stroke=\"#8c8c8c\" stroke-width=\"0.6\"/>\n",
            lx, y - 10);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">context (%s)</text>\n",
            lx + 19, y, b);
    y += 19;
  }
  fprintf(f,
          "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#222\" stroke-width=\"1.4\" "
          "stroke-dasharray=\"5 3\"/>\n",
          lx, y - 4, lx + 13, y - 4);
  fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">reserved</text>\n", lx + 19,
          y);
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"3\" height=\"13\" fill=\"#1b7a1b\"/>\n", lx + 5,
          y + 9);
  fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">release</text>\n", lx + 19,
          y + 19);
  fprintf(f,
          "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#777\" "
          "stroke-dasharray=\"2 3\"/>\n",
          lx + 6, y + 28, lx + 6, y + 41);
  fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">mark</text>\n", lx + 19,
          y + 38);
}

/* The frame, the legend to the right of it, and the note for no events. */
static void draw_frame_and_legend(const plot *p) {
  FILE *f = p->f;
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n",
          ML, MT, PW, PH);
  int lx = ML + PW + 18, ly = MT + 6;
  size_t nown = p->m->nown;
  draw_legend_owners(p, lx, ly);
  draw_legend_keys(p, lx,
                   ly + 20 + (int)(nown < LEGEND_OWNERS ? nown : LEGEND_OWNERS + 1) * 19 + 10);
  if (!p->s->n)
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" font-size=\"14\" text-anchor=\"middle\" fill=\"#888\">no "
            "events recorded</text>\n",
            ML + PW / 2, MT + PH / 2);
}

int mem_ledger_write_svg(mem_ledger *l, FILE *f, const char *title) {
  if (!l || !f)
    return ebb_seterr(EBB_EINVAL, "mem_ledger_write_svg: ledger and stream are required");
  ledger_snap s;
  int rc = mem__ledger_snapshot(l, &s);
  if (rc)
    return rc;
  svg_model m;
  rc = mem__svg_replay(&s, PW, &m);
  if (rc) {
    mem__ledger_snap_free(&s);
    return rc;
  }
  plot p = {.f = f, .s = &s, .m = &m};
  set_scales(&p);
  draw_head(&p, title);
  draw_axes(&p);
  draw_context(&p);
  draw_owners(&p);
  draw_reserved(&p);
  draw_marks(&p, draw_releases(&p));
  draw_frame_and_legend(&p);
  fprintf(f, "</svg>\n");
  if (ferror(f))
    rc = ebb_seterr(EBB_EIO, "ledger: writing SVG failed");
  mem__svg_model_free(&m);
  mem__ledger_snap_free(&s);
  return rc;
}
