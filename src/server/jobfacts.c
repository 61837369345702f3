/* A job's facts (jobfacts.h): its state published on the bus, its stages
 * as the runner counted them turned into JSON. */
#include "server/jobfacts.h"

#include <jansson.h>

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

char *srv_job_stages_json(const pl_job_result *res, int peaks) {
  json_t *a = json_array();
  for (int i = 0; a && i < res->nstages; i++) {
    const pl_stage_figures *f = &res->stages[i];
    json_t *o =
        json_pack("{s:s,s:I}", "name", f->name, "released_bytes", (json_int_t)f->released_bytes);
    if (o && peaks)
      json_object_set_new(o, "peak_bytes",
                          f->measured ? json_integer((json_int_t)f->peak_bytes) : json_null());
    if (!o || json_array_append_new(a, o) != 0) {
      json_decref(a);
      return NULL;
    }
  }
  char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
  json_decref(a);
  return text;
}
