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

void srv_stage_bytes_begin(srv_stage_bytes *t, pl_manager *m) {
  t->m = m;
  t->stages = json_array();
}

/* At each stage's end the runner answers what the stage's releases handed
 * back (the device thread, where this is called). */
void srv_stage_bytes_progress(void *arg, int index, int count, const char *stage, int done) {
  (void)index;
  (void)count;
  srv_stage_bytes *t = arg;
  if (done && t->stages)
    json_array_append_new(t->stages, json_pack("{s:s,s:I}", "name", stage, "released_bytes",
                                               (json_int_t)pl_manager_stage_released(t->m)));
}

char *srv_stage_bytes_end(srv_stage_bytes *t) {
  if (!t->stages)
    return NULL;
  char *text = json_dumps(t->stages, JSON_COMPACT);
  json_decref(t->stages);
  t->stages = NULL;
  return text;
}
