/* Who may call the server. Tokens come from --token-file (one per line:
 * `TOKEN [ROLE]`, ROLE `admin` (the default) or `submit`; `#` starts a
 * comment) and from EBB_TOKEN (admin). A request names one with
 * `Authorization: Bearer TOKEN`; tokens are compared in constant time. A
 * token's owner tag (a hash of it, never the token) marks the jobs it made.
 *
 * Browsers: the Host header must name this server (an IP address, localhost,
 * the listen host or an --allow-host name), so a DNS name rebound to
 * 127.0.0.1 is refused, and an Origin header, when sent, must name it too. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <arpa/inet.h>

#include "server/internal.h"

typedef struct token {
  char *secret;
  size_t len;
  srv_role role;
  char owner[24];
} token;

struct srv_auth {
  token *t;
  size_t n;
  char **hosts;
  size_t nhosts;
};

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static int add_token(srv_auth *a, const char *secret, size_t len, srv_role role) {
  token *t = realloc(a->t, (a->n + 1) * sizeof *t);
  if (!t)
    return ebb_seterr(EBB_ENOMEM, "tokens: out of host memory");
  a->t = t;
  token *k = &a->t[a->n];
  if (!(k->secret = strndup(secret, len)))
    return ebb_seterr(EBB_ENOMEM, "tokens: out of host memory");
  k->len = len;
  k->role = role;
  snprintf(k->owner, sizeof k->owner, "t%016llx", (unsigned long long)fnv1a(secret, len));
  a->n++;
  return 0;
}

/* One line of the token file: TOKEN [ROLE]. */
static int parse_line(srv_auth *a, const char *file, int line, char *s) {
  char *save = NULL, *tok = strtok_r(s, " \t\r\n", &save);
  if (!tok || tok[0] == '#')
    return 0;
  char *role = strtok_r(NULL, " \t\r\n", &save), *more = strtok_r(NULL, " \t\r\n", &save);
  srv_role r = SRV_ROLE_ADMIN;
  if (role && !strcmp(role, "submit"))
    r = SRV_ROLE_SUBMIT;
  else if (role && strcmp(role, "admin"))
    return ebb_seterr(EBB_EINVAL, "--token-file %s, line %d: role '%s': expected admin or "
                                  "submit", file, line, role);
  if (more && more[0] != '#')
    return ebb_seterr(EBB_EINVAL, "--token-file %s, line %d: expected TOKEN [ROLE], found "
                                  "more", file, line);
  if (strlen(tok) < 16)
    return ebb_seterr(EBB_EINVAL, "--token-file %s, line %d: a token needs at least 16 "
                                  "characters (make one: head -c 24 /dev/urandom | base64)",
                      file, line);
  return add_token(a, tok, strlen(tok), r);
}

static int load_file(srv_auth *a, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return ebb_seterr(EBB_EINVAL, "--token-file %s: %s", path, strerror(errno));
  char line[1024];
  int rc = 0, no = 0;
  while (!rc && fgets(line, sizeof line, f))
    rc = parse_line(a, path, ++no, line);
  fclose(f);
  if (!rc && !a->n)
    rc = ebb_seterr(EBB_EINVAL, "--token-file %s: no token in the file (one per line: TOKEN "
                                "[admin|submit])", path);
  return rc;
}

int srv_auth_load(const char *token_file, const char *env_token, srv_auth **out) {
  *out = NULL;
  srv_auth *a = calloc(1, sizeof *a);
  if (!a)
    return ebb_seterr(EBB_ENOMEM, "tokens: out of host memory");
  int rc = 0;
  if (token_file)
    rc = load_file(a, token_file);
  if (!rc && env_token && *env_token)
    rc = strlen(env_token) < 16
             ? ebb_seterr(EBB_EINVAL, "EBB_TOKEN: a token needs at least 16 characters")
             : add_token(a, env_token, strlen(env_token), SRV_ROLE_ADMIN);
  if (rc) {
    srv_auth_free(a);
    return rc;
  }
  *out = a;
  return 0;
}

void srv_auth_free(srv_auth *a) {
  if (!a)
    return;
  for (size_t i = 0; i < a->n; i++)
    free(a->t[i].secret);
  for (size_t i = 0; i < a->nhosts; i++)
    free(a->hosts[i]);
  free(a->t);
  free(a->hosts);
  free(a);
}

int srv_auth_add_host(srv_auth *a, const char *host) {
  char **h = realloc(a->hosts, (a->nhosts + 1) * sizeof *h);
  if (!h)
    return ebb_seterr(EBB_ENOMEM, "--allow-host: out of host memory");
  a->hosts = h;
  if (!(a->hosts[a->nhosts] = strdup(host)))
    return ebb_seterr(EBB_ENOMEM, "--allow-host: out of host memory");
  a->nhosts++;
  return 0;
}

int srv_auth_enabled(const srv_auth *a) { return a && a->n > 0; }

/* Constant time in the secret's content (the length is not a secret). */
static int same(const char *a, size_t an, const char *b, size_t bn) {
  unsigned char d = an != bn;
  size_t n = an < bn ? an : bn;
  for (size_t i = 0; i < n; i++)
    d |= (unsigned char)(a[i] ^ b[i]);
  return d == 0;
}

srv_role srv_auth_check(const srv_auth *a, struct MHD_Connection *c, char *owner, size_t n) {
  owner[0] = '\0';
  if (!srv_auth_enabled(a))
    return SRV_ROLE_ADMIN;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (!h || strncasecmp(h, "Bearer ", 7))
    return SRV_ROLE_NONE;
  h += 7;
  while (*h == ' ')
    h++;
  size_t len = strlen(h);
  while (len && (h[len - 1] == ' ' || h[len - 1] == '\t'))
    len--;
  srv_role role = SRV_ROLE_NONE;
  for (size_t i = 0; i < a->n; i++) /* every token compared: no early exit */
    if (same(h, len, a->t[i].secret, a->t[i].len)) {
      role = a->t[i].role;
      snprintf(owner, n, "%s", a->t[i].owner);
    }
  return role;
}

/* --- Host and Origin ------------------------------------------------------------ */
/* host (no port) is an IP literal, localhost, the listen host or allowed. */
static int name_ok(const ebb_server *s, const char *host) {
  unsigned char buf[16];
  if (inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1)
    return 1;
  if (!strcasecmp(host, "localhost") || !strcasecmp(host, s->host))
    return 1;
  for (size_t i = 0; i < s->auth->nhosts; i++)
    if (!strcasecmp(host, s->auth->hosts[i]))
      return 1;
  return 0;
}

/* "HOST[:PORT]" or "[V6][:PORT]" -> HOST. */
static int host_part(const char *hp, char *out, size_t n) {
  const char *end;
  if (hp[0] == '[') {
    end = strchr(hp, ']');
    if (!end)
      return -1;
    hp++;
  } else {
    end = strchr(hp, ':');
    if (!end)
      end = hp + strlen(hp);
  }
  size_t len = (size_t)(end - hp);
  if (!len || len >= n)
    return -1;
  memcpy(out, hp, len);
  out[len] = '\0';
  return 0;
}

int srv_host_ok(const ebb_server *s, struct MHD_Connection *c, char *msg, size_t n) {
  const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
  const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  char h[256];
  if (host && (host_part(host, h, sizeof h) != 0 || !name_ok(s, h))) {
    snprintf(msg, n, "Host '%.200s' does not name this server (start it with --allow-host NAME "
                     "to accept that name)", host);
    return 0;
  }
  if (origin) {
    const char *p = strstr(origin, "://");
    if (!p || host_part(p + 3, h, sizeof h) != 0 || !name_ok(s, h)) {
      snprintf(msg, n, "Origin '%.200s' is not this server: requests from other web pages are "
                       "refused", origin);
      return 0;
    }
  }
  return 1;
}

int srv_random_id(char out[33]) {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t k = getrandom(b + got, sizeof b - got, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return ebb_seterr(EBB_EIO, "getrandom: %s", strerror(errno));
    got += (size_t)k;
  }
  for (size_t i = 0; i < sizeof b; i++)
    snprintf(out + 2 * i, 3, "%02x", b[i]);
  return 0;
}
