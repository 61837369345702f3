/* A job's facts (jobfacts.h). */
#include "server/jobfacts.h"

#include <stdio.h>
#include <string.h>

#include "base/events.h"

void srv_job_publish(int64_t id, const char *uid, const char *pipeline, const char *device,
                     srv_job_state st, const char *code, const char *msg, uint64_t released,
                     const char *stages) {
  ebb_event ev = {.kind = EBB_EVENT_JOB,
                  .job = id,
                  .id = uid,
                  .pipeline = pipeline,
                  .device = device,
                  .state = srv_job_state_name(st),
                  .code = code,
                  .message = msg,
                  .bytes = released,
                  .detail = stages};
  base_event_publish(&ev);
}

/* A stage's release on this job's device, while it runs: its bytes. */
static void on_event(void *ctx, const ebb_event *ev) {
  srv_stage_bytes *t = ctx;
  if (ev->kind != EBB_EVENT_RELEASED || !ev->owner || !ev->device)
    return;
  pthread_mutex_lock(&t->mu);
  if (t->stage[0] && !strcmp(ev->device, t->device) && !strcmp(ev->owner, t->stage))
    t->bytes += ev->bytes;
  pthread_mutex_unlock(&t->mu);
}

int srv_stage_bytes_begin(srv_stage_bytes *t, const char *device) {
  memset(t, 0, sizeof *t);
  snprintf(t->device, sizeof t->device, "%s", device ? device : "");
  pthread_mutex_init(&t->mu, NULL);
  t->stages = json_array();
  int rc = t->stages ? ebb_events_subscribe(on_event, t, &t->sub) : EBB_ENOMEM;
  if (rc) {
    json_decref(t->stages);
    t->stages = NULL;
    pthread_mutex_destroy(&t->mu);
  }
  return rc;
}

/* The runner releases a stage before it reports it done. */
void srv_stage_bytes_progress(void *arg, int index, int count, const char *stage, int done) {
  (void)index;
  (void)count;
  srv_stage_bytes *t = arg;
  pthread_mutex_lock(&t->mu);
  if (!done) {
    snprintf(t->stage, sizeof t->stage, "%s", stage);
    t->bytes = 0;
  } else {
    json_array_append_new(t->stages, json_pack("{s:s,s:I}", "name", stage, "released_bytes",
                                               (json_int_t)t->bytes));
    t->stage[0] = '\0';
  }
  pthread_mutex_unlock(&t->mu);
}

char *srv_stage_bytes_end(srv_stage_bytes *t) {
  if (!t->stages)
    return NULL;
  ebb_events_unsubscribe(t->sub);
  char *text = json_dumps(t->stages, JSON_COMPACT);
  json_decref(t->stages);
  t->stages = NULL;
  pthread_mutex_destroy(&t->mu);
  return text;
}
