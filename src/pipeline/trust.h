/* Option trust levels (docs/stage-abi.md, "Option trust levels"; docs/api.md,
 * "Security"). Every option in a stage's options_schema is either
 * job-settable ("trust": "job") or operator-only ("trust": "operator"):
 * operator-only options come from the config file or the environment, and a
 * job may set one only when its pipeline's "allow_options" names it
 * ("STAGE.OPTION", STAGE being the stage entry's name).
 *
 * A schema may also give a string option a "format": "path" (a server
 * file), "url" (a remote the server sends to) or "secret" (a credential).
 * Their values never hold a control character. A job-set (allowed) path is
 * handed to the caller's hook, which opens it under its confinement; a
 * job-set (allowed) URL must be http(s) to a host of the pipeline's
 * "allow_url_hosts".
 *
 * A schema entry without "trust" (a third-party stage written before it
 * existed) is read safely: operator-only when it has a format, is a string
 * or of no declared type, or is a number without both a minimum and a
 * maximum; job-settable only for booleans and bounded numbers. */
#ifndef EBB_PIPELINE_TRUST_H
#define EBB_PIPELINE_TRUST_H

#include <jansson.h>

#include "pipeline/config.h"
#include "pipeline/registry.h"

/* --- "trust_schema.c": a stage's schema --------------------------------------- */
typedef enum { EBB_TRUST_JOB = 0, EBB_TRUST_OPERATOR = 1 } pl_opt_trust;
typedef enum {
  EBB_OPT_FMT_NONE = 0,
  EBB_OPT_FMT_PATH,
  EBB_OPT_FMT_URL,
  EBB_OPT_FMT_SECRET,
} pl_opt_format;

/* The trust level and format of one schema entry (spec: the option's object).
 * EBB_EABI naming stage and option for a "trust" other than "job" or
 * "operator", or a "format" other than "path", "url" or "secret" (refused,
 * so that a typo cannot weaken a check). */
int pl_option_trust(const char *stage, const char *option, const json_t *spec, pl_opt_trust *trust,
                    pl_opt_format *fmt);
/* "job" / "operator". */
const char *pl_trust_name(pl_opt_trust t);

/* Every option of st's schema has a valid trust level and format (the
 * registry refuses a stage that does not). */
int pl_schema_check_trust(const ebb_stage *st, const char *origin);
/* 1 when s holds a control character (below 0x20, or 0x7f). */
int pl_has_control_char(const char *s);

/* --- "trust.c": a pipeline's and a job's options ---------------------------------- */
/* Every "allow_options" entry of p names an option that its stage's schema
 * has (EBB_ECONFIG naming the entry); a worker stage's entries are its own. */
int pl_check_trust(const pl_registry *reg, const pl_def *p);

/* Called for each allowed, job-set path option, with its value; returns 0
 * when the caller took it (it opens it under its confinement and may replace
 * the value: opts is the stage's options object), or an EBB_E... code with
 * the message set (the check fails with it). */
typedef int (*pl_trust_path_fn)(void *arg, const char *stage, const char *option, const char *value,
                                json_t *opts);

/* Checks a job's options ({stage entry name: {option: value}}) against the
 * trust levels of pipeline p's stages: EBB_ECONFIG (HTTP 400 bad_request)
 * "option STAGE.OPTION is operator-only; ..." for an operator-only option
 * that "allow_options" does not name, "option STAGE.OPTION: ... control
 * character" for a path, URL or secret with one, "option STAGE.OPTION: host
 * ... is not in ..." for a URL outside "allow_url_hosts", and a path option
 * with no hook (on_path NULL) is refused. Unknown stages and options are
 * left to the schema check (pl_stage_validate_options). */
int pl_job_options_trust(const pl_registry *reg, const pl_def *p, json_t *options,
                         pl_trust_path_fn on_path, void *arg);

#endif
