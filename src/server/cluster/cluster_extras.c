/* What a job brings besides its input and options, on the queue
 * (cluster.h): the lyrics sent with it and the files of the path options it
 * may set. The node that takes the job checks them as a local job's
 * (srv_check_job_options: trust levels, "allow_options", --input-dir
 * confinement, one open, the size caps) and reads each once; their bytes
 * travel in Redis, in the hash PREFIX:extras:UID (field "lyrics", and
 * "opt:STAGE.OPTION" per file), never as a path that another node would
 * open. The job's options in Redis keep no such path.
 *
 * The node that runs the job trusts none of it (anyone who can write to
 * Redis can write these keys): only the fields the job's hash lists are
 * read; lyrics go to this node's pipeline's first align stage, held to its
 * cap and to text; a file's option must be one this node's config lets a
 * job set and of the path format; each becomes a file in the attempt's
 * directory that the option names. A field that fails is a bad entry (the
 * caller dead-letters it and fails the job naming why). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/cluster/cluster_int.h"

/* --- the submitting node ----------------------------------------------------------- */
static int read_all(int fd, size_t cap, char **buf, size_t *n) {
  *buf = NULL;
  *n = 0;
  size_t size = 0;
  if (lseek(fd, 0, SEEK_SET) < 0)
    return ebb_seterr(EBB_EIO, "rewinding: %s", strerror(errno));
  for (;;) {
    if (*n == size) {
      size_t ns = size ? size * 2 : 65536;
      char *nb = ns <= cap + 1 ? realloc(*buf, ns) : NULL;
      if (!nb && ns <= cap + 1)
        return ebb_seterr(EBB_ENOMEM, "out of host memory");
      if (!nb)
        return ebb_seterr(EBB_EINPUT, "the file grew past %zu bytes while it was read", cap);
      *buf = nb;
      size = ns;
    }
    ssize_t got = read(fd, *buf + *n, size - *n);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return ebb_seterr(EBB_EIO, "reading: %s", strerror(errno));
    if (got == 0)
      break;
    if ((*n += (size_t)got) > cap)
      return ebb_seterr(EBB_EINPUT, "the file grew past %zu bytes while it was read", cap);
  }
  return 0;
}

static int add_field(srv_extras *x, const char *name, char *data /* taken */, size_t n) {
  if (x->n == SRV_MAX_OPTFILES + 1) {
    free(data);
    return ebb_seterr(EBB_EINPUT, "too many files with one job");
  }
  snprintf(x->field[x->n], sizeof x->field[x->n], "%s", name);
  x->data[x->n] = data;
  x->len[x->n++] = n;
  return 0;
}

int srv_cluster_extras_take(srv_cluster *k, srv_input *in, srv_extras *x, unsigned *status) {
  memset(x, 0, sizeof *x);
  size_t total = in->lyrics ? in->lyrics_len : 0;
  int rc = 0;
  if (in->lyrics) {
    char *copy = malloc(in->lyrics_len + 1);
    if (!copy)
      return ebb_seterr(EBB_ENOMEM, "out of host memory");
    memcpy(copy, in->lyrics, in->lyrics_len);
    rc = add_field(x, "lyrics", copy, in->lyrics_len);
  }
  for (size_t i = 0; !rc && i < in->nfiles; i++) {
    const srv_optfile *f = &in->files[i];
    char name[160], *buf = NULL;
    size_t n = 0;
    if ((rc = read_all(f->fd, k->s->max_upload, &buf, &n)) != 0) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", ebb_errmsg());
      free(buf);
      return ebb_seterr(rc, "option %s.%s: %s", f->stage, f->option, msg);
    }
    if ((total += n) > k->inline_max) {
      free(buf);
      *status = MHD_HTTP_CONTENT_TOO_LARGE;
      return ebb_seterr(EBB_EINPUT,
                        "the files this job's options name come to more than the "
                        "%zu bytes that travel in Redis (--inline-max-mib)",
                        k->inline_max);
    }
    snprintf(name, sizeof name, "opt:%s.%s", f->stage, f->option);
    rc = add_field(x, name, buf, n);
    /* the value was a path on this node: the running node names its copy */
    if (!rc)
      json_object_del(json_object_get(in->options, f->stage), f->option);
  }
  return rc;
}

void srv_extras_free(srv_extras *x) {
  for (int i = 0; i < x->n; i++)
    free(x->data[i]);
  x->n = 0;
}

char *srv_extras_list(const srv_extras *x) {
  json_t *a = json_array();
  for (int i = 0; a && i < x->n; i++)
    json_array_append_new(a, json_string(x->field[i]));
  char *s = a ? json_dumps(a, JSON_COMPACT) : NULL;
  json_decref(a);
  return s;
}

/* --- the running node --------------------------------------------------------------- */
/* The message of the last error, as an EBB_EINPUT (a check the entry failed). */
static int as_bad_input(void) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ebb_errmsg());
  return ebb_seterr(EBB_EINPUT, "%s", msg);
}

/* A stage entry's or option's name as it may appear in a file name here
 * (option-STAGE.OPTION): printable, no '/', at most 64 bytes. */
static int word_ok(const char *s, size_t n) {
  if (!n || n > 64)
    return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f || s[i] == '/')
      return 0;
  return 1;
}

static int write_bytes(const char *path, const char *data, size_t n) {
  FILE *f = fopen(path, "wb"); /* a repeated attempt number writes its directory again */
  int ok = f && fwrite(data, 1, n, f) == n;
  if (f && fclose(f) != 0)
    ok = 0;
  return ok ? 0 : ebb_seterr(EBB_EIO, "cannot write %s: %s", path, strerror(errno));
}

static int set_path(json_t **options, const char *stage, const char *option, const char *path) {
  if (!*options && !(*options = json_object()))
    return ebb_seterr(EBB_ENOMEM, "out of host memory");
  json_t *so = json_object_get(*options, stage);
  if (!so && (json_object_set_new(*options, stage, so = json_object()) || !so))
    return ebb_seterr(EBB_ENOMEM, "out of host memory");
  if (!json_is_object(so))
    return ebb_seterr(EBB_EINPUT, "options for stage %s are not an object", stage);
  if (json_object_get(so, option))
    return ebb_seterr(EBB_EINPUT, "option %s.%s is set in the options and sent as a file", stage,
                      option);
  return json_object_set_new(so, option, json_string(path))
             ? ebb_seterr(EBB_ENOMEM, "out of host memory")
             : 0;
}

static int saw_path(void *arg, const char *stage, const char *option, const char *value,
                    json_t *opts) {
  (void)stage, (void)option, (void)value, (void)opts;
  *(int *)arg = 1;
  return 0;
}

/* "opt:STAGE.OPTION" as this node's config lets a job set it. */
static int place_file(srv_cluster *k, const char *pipe, const char *field, const char *data,
                      size_t n, const char *dir, json_t **options) {
  const char *so = field + 4, *dot = strrchr(so, '.');
  if (!dot || !word_ok(so, (size_t)(dot - so)) || !word_ok(dot + 1, strlen(dot + 1)))
    return ebb_seterr(EBB_EINPUT, "extras field '%.100s' is not opt:STAGE.OPTION", field);
  char stage[72], option[72], path[4400];
  snprintf(stage, sizeof stage, "%.*s", (int)(dot - so), so);
  snprintf(option, sizeof option, "%s", dot + 1);
  if (n > k->s->max_upload)
    return ebb_seterr(EBB_EINPUT, "option %s.%s: %zu bytes, more than the %zu this node takes",
                      stage, option, n, k->s->max_upload);
  /* the trust check on the option alone: allowed for jobs and a path */
  json_t *probe = json_pack("{s:{s:s}}", stage, option, "sent-with-the-job");
  int path_seen = 0;
  int rc = probe ? pl_manager_check_job(k->s->m, pipe, probe, saw_path, &path_seen)
                 : ebb_seterr(EBB_ENOMEM, "out of host memory");
  json_decref(probe);
  if (!rc && !path_seen)
    rc = ebb_seterr(EBB_EINPUT, "it is not a path option");
  if (rc) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ebb_errmsg());
    return ebb_seterr(EBB_EINPUT,
                      "a file sent for option %s.%s, which a job of pipeline '%s' "
                      "may not set to a path: %s",
                      stage, option, pipe, msg);
  }
  snprintf(path, sizeof path, "%s/option-%s.%s", dir, stage, option);
  rc = write_bytes(path, data, n);
  return rc ? rc : set_path(options, stage, option, path);
}

static int place_lyrics(srv_cluster *k, const char *pipe, const char *data, size_t n,
                        const char *dir, json_t **options) {
  const char *stage = NULL;
  char path[4400];
  if (n > k->s->max_lyrics)
    return ebb_seterr(EBB_EINPUT, "lyrics of %zu bytes, more than the %zu this node takes", n,
                      k->s->max_lyrics);
  if (memchr(data, '\0', n))
    return ebb_seterr(EBB_EINPUT, "lyrics that are not text (a NUL byte)");
  if (srv_lyrics_stage(k->s, pipe, *options, &stage) != 0)
    return as_bad_input();
  snprintf(path, sizeof path, "%s/lyrics.txt", dir);
  int rc = write_bytes(path, data, n);
  return rc ? rc : set_path(options, stage, "lyrics", path);
}

/* The job hash's list of extras fields (a JSON array of strings). */
static int listed_fields(srv_cluster *k, redisContext **c, const char *jkey, json_t **list) {
  *list = NULL;
  redisReply *r = srv_rcmd(k, c, "HGET %s extras", jkey);
  if (!r)
    return ebb_seterr(EBB_EIO, "queue: %s", k->last_err);
  int rc = 0;
  if (r->type == REDIS_REPLY_STRING) {
    *list = json_loads(r->str, 0, NULL);
    size_t i;
    json_t *v;
    int ok = json_is_array(*list) && json_array_size(*list) <= SRV_MAX_OPTFILES + 1;
    json_array_foreach(*list, i, v) ok = ok && json_is_string(v);
    if (!ok)
      rc = ebb_seterr(EBB_EINPUT, "the job's extras list is not a short JSON array of names");
  }
  freeReplyObject(r);
  return rc;
}

int srv_cluster_extras_place(srv_cluster *k, redisContext **c, const char *uid, const char *pipe,
                             const char *dir, json_t **options, int *bad) {
  char jkey[512], xkey[512];
  srv_rkey(k, jkey, sizeof jkey, "job", uid);
  srv_rkey(k, xkey, sizeof xkey, "extras", uid);
  json_t *list;
  int rc = listed_fields(k, c, jkey, &list);
  *bad = rc == EBB_EINPUT;
  size_t i;
  json_t *v;
  json_array_foreach(list, i, v) {
    if (rc)
      break;
    const char *f = json_string_value(v);
    redisReply *d = srv_rcmd(k, c, "HGET %s %s", xkey, f);
    if (!d)
      rc = ebb_seterr(EBB_EIO, "queue: %s", k->last_err);
    else if (d->type != REDIS_REPLY_STRING)
      rc = ebb_seterr(EBB_EINPUT, "extras field '%.100s' is missing from %s", f, xkey);
    else if (!strcmp(f, "lyrics"))
      rc = place_lyrics(k, pipe, d->str, d->len, dir, options);
    else if (!strncmp(f, "opt:", 4))
      rc = place_file(k, pipe, f, d->str, d->len, dir, options);
    else
      rc = ebb_seterr(EBB_EINPUT, "unknown extras field '%.100s'", f);
    *bad = rc == EBB_EINPUT;
    freeReplyObject(d);
  }
  json_decref(list);
  return rc;
}
