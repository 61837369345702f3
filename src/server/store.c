/* The job store's SQLite side (store.h): the schema, each job's row written
 * and read back, the keep rule's deletions. */
#include "server/store.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

struct srv_store {
  sqlite3 *db;
  pthread_mutex_t lock;
  char path[1024];
};

static const char *state_names[] = {"queued", "running", "succeeded", "failed", "cancelled"};

const char *srv_job_state_name(srv_job_state s) {
  return s < EBB_JOB_NSTATES ? state_names[s] : "unknown";
}

static int state_of(const char *name) {
  for (int i = 0; i < EBB_JOB_NSTATES; i++)
    if (name && !strcmp(name, state_names[i]))
      return i;
  return -1;
}

static int dberr(srv_store *s, const char *what) {
  return ebb_seterr(EBB_EIO, "job store %s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static const char *schema = "CREATE TABLE IF NOT EXISTS jobs ("
                            " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                            " pipeline TEXT NOT NULL,"
                            " input TEXT,"
                            " options TEXT,"
                            " state TEXT NOT NULL,"
                            " created REAL NOT NULL, started REAL, finished REAL,"
                            " error_code TEXT, error_message TEXT,"
                            " result TEXT, output_dir TEXT,"
                            " released_bytes INTEGER NOT NULL DEFAULT 0,"
                            " released_stages TEXT);"
                            "CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);";

/* Columns added since the first schema: a store made by an older server
 * gains them (its jobs keep their number as their public id). */
static void migrate(sqlite3 *db) {
  sqlite3_exec(db, "ALTER TABLE jobs ADD COLUMN uid TEXT", NULL, NULL, NULL);
  sqlite3_exec(db, "ALTER TABLE jobs ADD COLUMN owner TEXT", NULL, NULL, NULL);
  sqlite3_exec(db,
               "UPDATE jobs SET uid=CAST(id AS TEXT) WHERE uid IS NULL;"
               "CREATE UNIQUE INDEX IF NOT EXISTS jobs_uid ON jobs(uid);",
               NULL, NULL, NULL);
}

static int exec_bind(srv_store *s, const char *what, const char *sql, const char *fmt, ...);

int srv_store_open(const char *path, srv_store **out, int *interrupted) {
  srv_store *s = calloc(1, sizeof *s);
  if (!s)
    return ebb_seterr(EBB_ENOMEM, "job store: out of host memory");
  snprintf(s->path, sizeof s->path, "%s", path);
  pthread_mutex_init(&s->lock, NULL);
  int rc;
  if (sqlite3_open_v2(path, &s->db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      NULL) != SQLITE_OK) {
    rc = dberr(s, "open");
    goto fail;
  }
  sqlite3_busy_timeout(s->db, 5000);
  char *msg = NULL;
  if (sqlite3_exec(s->db, "PRAGMA journal_mode=WAL;", NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(s->db, schema, NULL, NULL, &msg) != SQLITE_OK) {
    rc = ebb_seterr(EBB_EIO, "job store %s: %s", path, msg ? msg : "cannot set up");
    sqlite3_free(msg);
    goto fail;
  }
  migrate(s->db);
  if ((rc = exec_bind(s, "mark interrupted jobs",
                      "UPDATE jobs SET state='failed', finished=?1, error_code='EBB_ECANCELED',"
                      " error_message='server restarted while the job was running'"
                      " WHERE state='running'",
                      "d", base_wall_s())))
    goto fail;
  if (interrupted)
    *interrupted = sqlite3_changes(s->db);
  *out = s;
  return 0;
fail:
  srv_store_close(s);
  return rc;
}

void srv_store_close(srv_store *s) {
  if (!s)
    return;
  sqlite3_close(s->db);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* Runs one statement with text/int/double binds given as a format string:
 * 's' text (NULL: NULL), 'i' int64, 'd' double. */
static int exec_bind(srv_store *s, const char *what, const char *sql, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *st = NULL;
  int rc = 0;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
    rc = dberr(s, what);
    goto out;
  }
  for (int i = 0; fmt[i]; i++) {
    switch (fmt[i]) {
    case 's': {
      const char *v = va_arg(ap, const char *);
      if (v)
        sqlite3_bind_text(st, i + 1, v, -1, SQLITE_TRANSIENT);
      else
        sqlite3_bind_null(st, i + 1);
      break;
    }
    case 'i': sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t)); break;
    case 'd': sqlite3_bind_double(st, i + 1, va_arg(ap, double)); break;
    }
  }
  if (sqlite3_step(st) != SQLITE_DONE)
    rc = dberr(s, what);
out:
  sqlite3_finalize(st);
  pthread_mutex_unlock(&s->lock);
  va_end(ap);
  return rc;
}

int srv_store_insert(srv_store *s, const char *uid, const char *owner, const char *pipeline,
                     const char *input, const char *options, int64_t *id) {
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *st = NULL;
  int rc = 0;
  if (sqlite3_prepare_v2(s->db,
                         "INSERT INTO jobs(pipeline,input,options,state,created,uid,owner)"
                         " VALUES(?1,?2,?3,'queued',?4,?5,?6)",
                         -1, &st, NULL) != SQLITE_OK) {
    rc = dberr(s, "insert");
    goto out;
  }
  sqlite3_bind_text(st, 1, pipeline, -1, SQLITE_TRANSIENT);
  if (input)
    sqlite3_bind_text(st, 2, input, -1, SQLITE_TRANSIENT);
  if (options)
    sqlite3_bind_text(st, 3, options, -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(st, 4, base_wall_s());
  sqlite3_bind_text(st, 5, uid, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 6, owner ? owner : "", -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_DONE)
    rc = dberr(s, "insert");
  else
    *id = sqlite3_last_insert_rowid(s->db);
out:
  sqlite3_finalize(st);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int srv_store_set_input(srv_store *s, int64_t id, const char *input, const char *outdir) {
  return exec_bind(s, "set input", "UPDATE jobs SET input=?1, output_dir=?2 WHERE id=?3", "ssi",
                   input, outdir, id);
}

int srv_store_set_running(srv_store *s, int64_t id) {
  return exec_bind(s, "set running", "UPDATE jobs SET state='running', started=?1 WHERE id=?2",
                   "di", base_wall_s(), id);
}

int srv_store_finish(srv_store *s, int64_t id, srv_job_state state, const char *err_code,
                     const char *err_msg, const char *result, uint64_t released,
                     const char *released_stages) {
  return exec_bind(s, "finish",
                   "UPDATE jobs SET state=?1, finished=?2, error_code=?3, error_message=?4,"
                   " result=?5, released_bytes=?6, released_stages=?7 WHERE id=?8",
                   "sdsssisi", srv_job_state_name(state), base_wall_s(), err_code, err_msg, result,
                   (int64_t)released, released_stages, id);
}

static json_t *col_json(sqlite3_stmt *st, int i) {
  switch (sqlite3_column_type(st, i)) {
  case SQLITE_NULL: return json_null();
  case SQLITE_INTEGER: return json_integer(sqlite3_column_int64(st, i));
  case SQLITE_FLOAT: return json_real(sqlite3_column_double(st, i));
  default: return json_string((const char *)sqlite3_column_text(st, i));
  }
}

static json_t *parsed(sqlite3_stmt *st, int i) {
  const char *t = (const char *)sqlite3_column_text(st, i);
  json_t *v = t ? json_loads(t, JSON_DECODE_ANY, NULL) : NULL;
  return v ? v : json_null();
}

int srv_store_get(srv_store *s, int64_t id, json_t **out) {
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *st = NULL;
  int rc = 0;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT id,pipeline,input,options,state,created,started,finished,"
                         "error_code,error_message,result,output_dir,released_bytes,"
                         "released_stages,uid FROM jobs WHERE id=?1",
                         -1, &st, NULL) != SQLITE_OK) {
    rc = dberr(s, "get");
    goto out;
  }
  sqlite3_bind_int64(st, 1, id);
  int step = sqlite3_step(st);
  if (step == SQLITE_DONE) {
    rc = ebb_seterr(EBB_ENOTFOUND, "no job %lld", (long long)id);
    goto out;
  }
  if (step != SQLITE_ROW) {
    rc = dberr(s, "get");
    goto out;
  }
  json_t *o = json_object();
  json_object_set_new(o, "id", col_json(st, 14));
  json_object_set_new(o, "pipeline", col_json(st, 1));
  json_object_set_new(o, "input", col_json(st, 2));
  json_object_set_new(o, "options", parsed(st, 3));
  json_object_set_new(o, "state", col_json(st, 4));
  json_object_set_new(o, "created", col_json(st, 5));
  json_object_set_new(o, "started", col_json(st, 6));
  json_object_set_new(o, "finished", col_json(st, 7));
  json_t *err = json_null();
  if (sqlite3_column_type(st, 8) != SQLITE_NULL)
    err = json_pack("{s:o,s:o}", "code", col_json(st, 8), "message", col_json(st, 9));
  json_object_set_new(o, "error", err);
  json_object_set_new(o, "result", parsed(st, 10));
  json_object_set_new(o, "output_dir", col_json(st, 11));
  json_object_set_new(o, "released_bytes", col_json(st, 12));
  json_t *stages = parsed(st, 13);
  json_object_set_new(o, "stages", json_is_null(stages) ? json_array() : stages);
  if (json_is_null(stages))
    json_decref(stages);
  *out = o;
out:
  sqlite3_finalize(st);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int srv_store_state(srv_store *s, int64_t id, srv_job_state *state) {
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *st = NULL;
  int rc = 0;
  if (sqlite3_prepare_v2(s->db, "SELECT state FROM jobs WHERE id=?1", -1, &st, NULL) != SQLITE_OK) {
    rc = dberr(s, "state");
    goto out;
  }
  sqlite3_bind_int64(st, 1, id);
  if (sqlite3_step(st) != SQLITE_ROW) {
    rc = ebb_seterr(EBB_ENOTFOUND, "no job %lld", (long long)id);
    goto out;
  }
  int v = state_of((const char *)sqlite3_column_text(st, 0));
  *state = v < 0 ? EBB_JOB_FAILED : (srv_job_state)v;
out:
  sqlite3_finalize(st);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int srv_store_counts(srv_store *s, uint64_t *counts) {
  memset(counts, 0, EBB_JOB_NSTATES * sizeof *counts);
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *st = NULL;
  int rc = 0;
  if (sqlite3_prepare_v2(s->db, "SELECT state, COUNT(*) FROM jobs GROUP BY state", -1, &st, NULL) !=
      SQLITE_OK) {
    rc = dberr(s, "counts");
    goto out;
  }
  while (sqlite3_step(st) == SQLITE_ROW) {
    int v = state_of((const char *)sqlite3_column_text(st, 0));
    if (v >= 0)
      counts[v] = (uint64_t)sqlite3_column_int64(st, 1);
  }
out:
  sqlite3_finalize(st);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

/* The ids one query answers (its one column), in its order. */
static int ids_of(srv_store *s, const char *what, const char *sql, int64_t limit, int64_t **ids,
                  size_t *n) {
  *ids = NULL;
  *n = 0;
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *st = NULL;
  int rc = 0;
  size_t cap = 0;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
    rc = dberr(s, what);
    goto out;
  }
  if (limit > 0)
    sqlite3_bind_int64(st, 1, limit);
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (*n == cap) {
      cap = cap ? cap * 2 : 16;
      int64_t *p = realloc(*ids, cap * sizeof *p);
      if (!p) {
        rc = ebb_seterr(EBB_ENOMEM, "job store: out of host memory");
        break;
      }
      *ids = p;
    }
    (*ids)[(*n)++] = sqlite3_column_int64(st, 0);
  }
out:
  sqlite3_finalize(st);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int srv_store_queued(srv_store *s, int64_t **ids, size_t *n) {
  return ids_of(s, "queued", "SELECT id FROM jobs WHERE state='queued' ORDER BY id", 0, ids, n);
}

int srv_store_newest(srv_store *s, size_t max, int64_t **ids, size_t *n) {
  if (max == 0) {
    *ids = NULL;
    *n = 0;
    return 0;
  }
  return ids_of(s, "newest",
                "SELECT id FROM (SELECT id FROM jobs ORDER BY id DESC LIMIT ?1) "
                "ORDER BY id",
                (int64_t)max, ids, n);
}

int srv_store_find(srv_store *s, const char *uid, int64_t *id, char *owner, size_t n) {
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *st = NULL;
  int rc = 0;
  if (sqlite3_prepare_v2(s->db, "SELECT id, owner FROM jobs WHERE uid=?1", -1, &st, NULL) !=
      SQLITE_OK) {
    rc = dberr(s, "find");
    goto out;
  }
  sqlite3_bind_text(st, 1, uid, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_ROW) {
    rc = ebb_seterr(EBB_ENOTFOUND, "no job '%s'", uid);
    goto out;
  }
  *id = sqlite3_column_int64(st, 0);
  const char *o = (const char *)sqlite3_column_text(st, 1);
  snprintf(owner, n, "%s", o ? o : "");
out:
  sqlite3_finalize(st);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int srv_store_requeue(srv_store *s, int64_t id) {
  return exec_bind(s, "requeue", "UPDATE jobs SET state='queued', started=NULL WHERE id=?1", "i",
                   id);
}

/* Finished jobs past the count or the age, oldest first. */
int srv_store_prune(srv_store *s, uint64_t keep, double max_age_s, srv_store_prune_fn fn,
                    void *arg) {
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *st = NULL;
  int rc = 0, n = 0;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT id, output_dir FROM jobs WHERE state IN ('succeeded','failed',"
                         "'cancelled') AND (finished < ?1 OR id NOT IN (SELECT id FROM jobs "
                         "WHERE state IN ('succeeded','failed','cancelled') ORDER BY id DESC "
                         "LIMIT ?2)) ORDER BY id",
                         -1, &st, NULL) != SQLITE_OK) {
    rc = dberr(s, "prune");
    goto out;
  }
  sqlite3_bind_double(st, 1, max_age_s > 0 ? base_wall_s() - max_age_s : -1.0);
  sqlite3_bind_int64(st, 2, keep ? (sqlite3_int64)keep : -1);
  sqlite3_stmt *del = NULL;
  sqlite3_prepare_v2(s->db, "DELETE FROM jobs WHERE id=?1", -1, &del, NULL);
  while (del && sqlite3_step(st) == SQLITE_ROW) {
    const char *dir = (const char *)sqlite3_column_text(st, 1);
    if (fn)
      fn(arg, sqlite3_column_int64(st, 0), dir);
    sqlite3_bind_int64(del, 1, sqlite3_column_int64(st, 0));
    sqlite3_step(del);
    sqlite3_reset(del);
    n++;
  }
  sqlite3_finalize(del);
  rc = n;
out:
  sqlite3_finalize(st);
  pthread_mutex_unlock(&s->lock);
  return rc;
}
