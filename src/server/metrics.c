/* GET /metrics: Prometheus text format, every family with HELP and TYPE
 * (promtool check metrics passes), read from the snapshot and the store. */
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

static void label_value(FILE *f, const char *v) {
  for (const char *p = v; p && *p; p++)
    fprintf(f, *p == '"' || *p == '\\' ? "\\%c" : (*p == '\n' ? "\\n" : "%c"), *p);
}

static void family(FILE *f, const char *name, const char *type, const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void jobs_and_release(srv_server *s, FILE *f, json_t *snap) {
  uint64_t counts[EBB_JOB_NSTATES];
  srv_store_counts(s->store, counts);
  family(f, "ebb_jobs", "gauge", "Jobs in the store by state.");
  for (int i = 0; i < EBB_JOB_NSTATES; i++)
    fprintf(f, "ebb_jobs{state=\"%s\"} %llu\n", srv_job_state_name(i),
            (unsigned long long)counts[i]);
  family(f, "ebb_released_bytes_total", "counter", "Device bytes ebb handed back to the driver.");
  fprintf(f, "ebb_released_bytes_total %lld\n",
          (long long)json_integer_value(json_object_get(snap, "released_total")));
}

static void dev_label(FILE *f, json_t *mem) {
  fprintf(f, "device=\"");
  label_value(f, json_string_value(json_object_get(json_object_get(mem, "device"), "label")));
  fprintf(f, "\"");
}

/* Every device series has a device label, one line per device. */
static void devices(FILE *f, json_t *devs) {
  static const char *gauges[][4] = {
      {"ebb_device_reserved_bytes", "allocator", "reserved_bytes",
       "Device bytes ebb's allocator holds from the driver."},
      {"ebb_device_allocated_bytes", "allocator", "allocated_bytes",
       "Device bytes in live blocks."},
      {"ebb_device_cached_bytes", "allocator", "cached_bytes",
       "Device bytes held but not in use (given back by a release)."},
      {"ebb_device_free_bytes", "device", "driver_free_bytes",
       "Free device memory as the driver reports it."},
      {"ebb_device_total_bytes", "device", "driver_total_bytes",
       "Total device memory as the driver reports it."},
  };
  size_t d;
  json_t *mem;
  for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
    family(f, gauges[i][0], "gauge", gauges[i][3]);
    json_array_foreach(devs, d, mem) {
      json_t *src = json_object_get(mem, gauges[i][1]);
      fprintf(f, "%s{", gauges[i][0]);
      dev_label(f, mem);
      fprintf(f, "} %lld\n", (long long)json_integer_value(json_object_get(src, gauges[i][2])));
    }
  }
  family(f, "ebb_context_held", "gauge", "1 while this process holds the device context.");
  json_array_foreach(devs, d, mem) {
    fprintf(f, "ebb_context_held{");
    dev_label(f, mem);
    fprintf(f, "} %d\n", json_is_true(json_object_get(json_object_get(mem, "context"), "held")));
  }
  family(f, "ebb_device_failed", "gauge",
         "1 when the device failed and was taken out of placement.");
  json_array_foreach(devs, d, mem) {
    fprintf(f, "ebb_device_failed{");
    dev_label(f, mem);
    fprintf(f, "} %d\n", !strcmp(json_string_value(json_object_get(mem, "state")) ?: "", "failed"));
  }
  family(f, "ebb_device_busy", "gauge", "1 while the device runs a job.");
  json_array_foreach(devs, d, mem) {
    fprintf(f, "ebb_device_busy{");
    dev_label(f, mem);
    fprintf(f, "} %d\n",
            !strcmp(json_string_value(json_object_get(mem, "state")) ?: "", "running"));
  }
  family(f, "ebb_owner_bytes", "gauge", "Device bytes each owner holds now.");
  json_array_foreach(devs, d, mem) {
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(mem, "owners"), i, o) {
      fprintf(f, "ebb_owner_bytes{owner=\"");
      label_value(f, json_string_value(json_object_get(o, "name")));
      fprintf(f, "\",");
      dev_label(f, mem);
      fprintf(f, "} %lld\n", (long long)json_integer_value(json_object_get(o, "bytes")));
    }
  }
}

/* Who got a connection and who lost one (conns.c). */
static void connections(srv_server *s, FILE *f) {
  srv_conn_stats st;
  srv_conns_stats(s->conns, &st);
  family(f, "ebb_connections_open", "gauge", "HTTP connections open now.");
  fprintf(f, "ebb_connections_open %u\n", st.open);
  family(f, "ebb_connections_closed_total", "counter",
         "HTTP connections the server closed, by why: evicted (a newcomer over "
         "max_connections or max_connections_per_ip took the place of the oldest without a "
         "whole request), refused (nothing to evict), idle_pressure (kept alive and idle while "
         "3/4 of max_connections were open), deadline (header_timeout_s, min_body_rate).");
  fprintf(f, "ebb_connections_closed_total{why=\"evicted\"} %llu\n",
          (unsigned long long)st.evicted);
  fprintf(f, "ebb_connections_closed_total{why=\"refused\"} %llu\n",
          (unsigned long long)st.refused);
  fprintf(f, "ebb_connections_closed_total{why=\"idle_pressure\"} %llu\n",
          (unsigned long long)st.idle_closed);
  fprintf(f, "ebb_connections_closed_total{why=\"deadline\"} %llu\n",
          (unsigned long long)st.timed_out);
}

static void pipelines(FILE *f, json_t *snap) {
  size_t i;
  json_t *o;
  family(f, "ebb_pipeline_loaded", "gauge", "1 while the pipeline is loaded (on any device).");
  json_array_foreach(json_object_get(snap, "pipelines"), i, o) {
    fprintf(f, "ebb_pipeline_loaded{pipeline=\"");
    label_value(f, json_string_value(json_object_get(o, "name")));
    fprintf(f, "\"} %d\n", json_is_true(json_object_get(o, "loaded")));
  }
  family(f, "ebb_sessions", "gauge", "Open sessions (leases on loaded pipelines).");
  fprintf(f, "ebb_sessions %lld\n",
          (long long)json_integer_value(json_object_get(snap, "sessions")));
}

enum MHD_Result srv_metrics(srv_server *s, struct MHD_Connection *c, srv_req *r) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (!f)
    return srv_send_err(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of host memory");
  json_t *snap = srv_snapshot(s);
  jobs_and_release(s, f, snap);
  devices(f, json_object_get(snap, "devices"));
  pipelines(f, snap);
  connections(s, f);
  srv_fact_counts_metrics(s->facts, f);
  srv_sleep_metrics(s, f);
  if (s->broker)
    srv_broker_metrics(f);   /* ebb_broker_* (docs/broker.md) */
  srv_cluster_metrics(s, f); /* the node's id and queue counters (--queue) */
  json_decref(snap);
  fclose(f);
  buf = srv_cluster_label_metrics(s, buf); /* node="ID" on every series (--queue) */
  return srv_send_text(c, r, MHD_HTTP_OK, "text/plain; version=0.0.4", buf);
}
