/* The fair limits on the queue (issue 45, "Fair limits"): how many jobs wait
 * to run in all (--max-queued) and per token (--max-queued-per-token), and
 * how many bytes of files the waiting jobs keep on disk in all
 * (--queued-bytes, 507) and per token (--queued-bytes-per-token, 429), so
 * that one token flooding the queue neither locks out the others nor fills
 * the data directory. A server without tokens has one caller: the per-token
 * limits do not apply there. */
#include <sys/stat.h>

#include "server/internal.h"

/* "3.0 GiB", "512 MiB", "12 KiB" for a message. */
static const char *bytes_text(uint64_t b, char *buf, size_t n) {
  if (b >= (1ull << 30))
    snprintf(buf, n, "%.1f GiB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20))
    snprintf(buf, n, "%.1f MiB", (double)b / (double)(1ull << 20));
  else
    snprintf(buf, n, "%.0f KiB", (double)b / 1024.0);
  return buf;
}

static int too_many(struct MHD_Connection *c, srv_req *r, enum MHD_Result *ret, int mine,
                    size_t have, size_t limit) {
  r->retry_after_s = SRV_RETRY_AFTER_S;
  *ret = srv_send_err(c, r, MHD_HTTP_TOO_MANY_REQUESTS, "queue_full",
                      "%s%zu jobs %swaiting to run, the most %s queues (%s %zu); retry later",
                      mine ? "this token has " : "", have, mine ? "" : "are ",
                      mine ? "one token" : "this server",
                      mine ? "--max-queued-per-token" : "--max-queued", limit);
  return 1;
}

static int over_budget(struct MHD_Connection *c, srv_req *r, enum MHD_Result *ret, int total,
                       uint64_t held, uint64_t bytes, uint64_t budget) {
  char h[32], b[32], l[32];
  bytes_text(held, h, sizeof h);
  bytes_text(bytes, b, sizeof b);
  bytes_text(budget, l, sizeof l);
  if (!total)
    r->retry_after_s = SRV_RETRY_AFTER_S;
  *ret = srv_send_err(c, r, total ? MHD_HTTP_INSUFFICIENT_STORAGE : MHD_HTTP_TOO_MANY_REQUESTS,
                      total ? "insufficient_storage" : "queue_full",
                      "%s jobs waiting to run keep %s of files on disk; this job's %s would pass "
                      "%s budget for them (%s %s); retry once some have run",
                      total ? "the" : "this token's", h, b,
                      total ? "this server's" : "the per-token",
                      total ? "--queued-bytes" : "--queued-bytes-per-token", l);
  return 1;
}

int srv_queue_full(srv_server *s, struct MHD_Connection *c, srv_req *r, uint64_t bytes,
                   enum MHD_Result *ret) {
  int tokens = r->owner[0] != 0;
  srv_queue_use u;
  srv_queue_usage(s->queue, tokens ? r->owner : NULL, &u);
  if (u.jobs >= s->max_queued)
    return too_many(c, r, ret, 0, u.jobs, s->max_queued);
  if (tokens && u.owner_jobs >= s->max_queued_per_token)
    return too_many(c, r, ret, 1, u.owner_jobs, s->max_queued_per_token);
  if (bytes && u.bytes + bytes > s->queued_bytes)
    return over_budget(c, r, ret, 1, u.bytes, bytes, s->queued_bytes);
  if (bytes && tokens && u.owner_bytes + bytes > s->queued_bytes_per_token)
    return over_budget(c, r, ret, 0, u.owner_bytes, bytes, s->queued_bytes_per_token);
  return 0;
}

static uint64_t fd_bytes(int fd) {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
}

uint64_t srv_job_bytes(const srv_req *r, const srv_input *in) {
  struct stat st;
  uint64_t b = in->lyrics ? in->lyrics_len : 0;
  if (in->upload)
    b += stat(r->tmp, &st) == 0 ? (uint64_t)st.st_size : 0;
  else
    b += fd_bytes(in->fd);
  for (size_t i = 0; i < in->nfiles; i++)
    b += fd_bytes(in->files[i].fd);
  return b;
}
