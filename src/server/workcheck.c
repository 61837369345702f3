/* Refusal at submit by estimated work (issue 31, "Deadlines that hold"): a
 * job whose stages estimate more CPU seconds than the server's limit cannot
 * finish within it, so it gets 400 with the figures instead of a place in
 * the queue and a timeout later. The limit: --max-job-seconds, else, on a
 * server whose devices are all CPUs, the job's own deadline (the pipeline's
 * timeout_s, else --job-timeout). The estimate is CPU seconds: on a GPU a
 * job estimated over its deadline may well finish within it, so there the
 * deadline alone ends it unless the operator sets a limit. Session items
 * are held to the same limit (they run here, with or without --queue); jobs
 * on the queue are not checked (the node that runs one is not known at
 * submit). */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "device/device.h"
#include "pipeline/work.h"
#include "server/internal.h"

/* 1 when every device the server runs jobs on is a CPU. */
static int cpu_only(const srv_server *s) {
  for (size_t i = 0; i < s->ndev; i++)
    if (dev_kind_of(pl_manager_device(s->ms[i])) != EBB_DEVICE_CPU)
      return 0;
  return 1;
}

/* The limit for a job of pipeline and where it comes from; 0: none. */
static double work_limit(srv_server *s, const char *pipeline, const char **from) {
  if (s->max_job_s < 0.0)
    return 0.0;
  if (s->max_job_s > 0.0) {
    *from = "--max-job-seconds";
    return s->max_job_s;
  }
  if (!cpu_only(s))
    return 0.0;
  const pl_def *d = pl_manager_pipeline(s->m, pipeline);
  if (d && d->timeout_s > 0.0) {
    *from = "the pipeline's timeout_s";
    return d->timeout_s;
  }
  *from = "--job-timeout";
  return s->job_timeout_s;
}

static void set_opt(json_t *o, const char *stage, const char *option, const char *value) {
  json_t *so = json_object_get(o, stage);
  if (!json_is_object(so)) {
    so = json_object();
    json_object_set_new(o, stage, so);
  }
  json_object_set_new(so, option, json_string(value));
}

/* The options the estimate sees (new reference): the job's, with the files
 * it sends (its lyrics, path options) named as the server holds them,
 * /proc/self/fd/N, so that a stage's estimate counts what will run (align:
 * the words of its lyrics) and never opens the caller's path again. *memfd:
 * the lyrics' descriptor, the caller closes it (-1: none). */
static json_t *work_options(const srv_input *in, int *memfd) {
  json_t *o = in->options ? json_deep_copy(in->options) : json_object();
  char path[64];
  *memfd = -1;
  for (size_t i = 0; o && i < in->nfiles; i++) {
    snprintf(path, sizeof path, "/proc/self/fd/%d", in->files[i].fd);
    set_opt(o, in->files[i].stage, in->files[i].option, path);
  }
  if (o && in->lyrics && in->lyrics_stage &&
      (*memfd = memfd_create("ebb-lyrics", MFD_CLOEXEC)) >= 0 &&
      write(*memfd, in->lyrics, in->lyrics_len) == (ssize_t)in->lyrics_len) {
    snprintf(path, sizeof path, "/proc/self/fd/%d", *memfd);
    set_opt(o, in->lyrics_stage, "lyrics", path);
  }
  return o;
}

int srv_check_work(srv_server *s, struct MHD_Connection *c, srv_req *r, srv_input *in,
                   enum MHD_Result *ret) {
  const char *from = NULL;
  double limit = work_limit(s, in->pipeline, &from);
  if (limit <= 0.0)
    return 0;
  const char *file = in->upload ? r->tmp : in->real, *how = "header";
  double secs = 0.0;
  uint32_t rate = 0;
  if (!file[0] || pl_input_seconds(file, &secs, &rate, &how) != 0)
    secs = 0.0; /* the decode stage will say what is wrong with it */
  pl_job_work w;
  int lfd;
  json_t *opts = work_options(in, &lfd);
  int rc = pl_manager_job_work(s->m, in->pipeline, opts, secs, rate, &w);
  json_decref(opts);
  if (lfd >= 0)
    close(lfd);
  if (rc) {
    *ret = srv_send_ebb_err(c, r, rc, ebb_errmsg());
    return 1;
  }
  if (w.cpu_s <= limit)
    return 0;
  char est[32], lim[32], top[32], len[32];
  char whole[80] = "";
  if (w.cpu_s > w.top_cpu_s * 1.05)
    snprintf(whole, sizeof whole, " (%s for the whole job)",
             pl_work_figure(w.cpu_s, top, sizeof top));
  pl_work_figure(w.top_cpu_s, est, sizeof est);
  pl_work_figure(limit, lim, sizeof lim);
  pl_work_figure(secs, len, sizeof len);
  base_log(EBB_LOG_INFO, "server", "job refused: %s estimated %s of work, limit %s (%s)",
           w.top_stage, est, lim, from);
  *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                      "%s%s%s on %s%s of audio: estimated %s of work%s, over this server's "
                      "limit of %s (%s)",
                      w.top_stage, w.top_drivers[0] ? " with " : "", w.top_drivers,
                      !strcmp(how, "size") ? "about " : "", len, est, whole, lim, from);
  return 1;
}
