/* Stage option tables: a stage writes each option once, as one row of a
 * list macro (name, default, bounds, description), and gets from it both
 * the JSON schema text of ebb_stage.options_schema and the C values it
 * loads with, so a default or a bound cannot say one thing in the schema
 * and another in the code.
 *
 *   #define MY_OPTIONS(NUM, INT, STR, BOOL, SEP, OP_NUM, OP_INT, PATH, URL, SECRET) \
 *     NUM(gain, 0.5, 0, 4, "linear gain") SEP                            \
 *     INT(hop, 256, 1, 65536, "STFT hop in samples") SEP                 \
 *     STR(mode, "fast", "fast or exact") SEP                              \
 *     BOOL(hpss, 1, "apply the harmonic mask") SEP                        \
 *     OP_NUM(max_seconds, 900, 1, 86400, "longest input") SEP            \
 *     PATH(words, "", "a text file")
 *   EBB_STAGE_OPTIONS(MY_OPTIONS)
 *
 * (a list that uses none of the operator-only kinds may end its parameters
 * with `...` after SEP).
 *
 * declares, file-local (one table per stage file):
 *   stage_opts               struct { double gain; int hop; const char *mode; int hpss; }
 *   stage_opts_schema[]      {"gain": {"type": "number", "default": 0.5, "minimum": 0,
 *                            "maximum": 4, "description": "linear gain"}, ...}
 *   stage_opts_read(stage, json, &opts)
 *                            fills opts: each option from json (an object, or NULL), its
 *                            default when absent or null; EBB_ECONFIG with
 *                            "STAGE: option NAME=V must be in MIN..MAX" for a number
 *                            outside its bounds ("STAGE: option 'NAME' must be ..." for
 *                            a wrong type). Strings point into json.
 *   stage_opts_parse(stage, options_json, &root, &opts)
 *                            the same from the text a stage's load is given.
 *
 * Rows are separated by SEP (no SEP after the last). Defaults and bounds are
 * plain literals written as JSON numbers (no C suffixes: they are copied into
 * the schema as written); descriptions are C string literals that must not
 * hold a double quote. NUM is JSON "number" (C double), INT "integer" (C int,
 * bounds within int), STR "string", BOOL "boolean" (default 1 or 0).
 *
 * Trust (docs/stage-abi.md, "Option trust levels"): NUM, INT, STR and BOOL
 * are options a job may set ("trust": "job" in the schema). The other kinds
 * are operator-only ("trust": "operator"): they come from the config file or
 * the environment, and a job may set one only where the pipeline's
 * "allow_options" names it. OP_NUM and OP_INT are numbers with no bound that
 * is safe for a job (a limit the operator sets: decode's max_seconds, how
 * long the server waits on a remote); PATH ("format": "path") names a server
 * file (a job's value, when allowed, is opened by the server under the
 * --input-dir confinement and the stage gets the server's copy); URL
 * ("format": "url") a remote the server sends to (when allowed, only to the
 * pipeline's "allow_url_hosts"); SECRET ("format": "secret") a credential.
 * The values of PATH, URL and SECRET options never hold a control character
 * (they end up in file names and HTTP headers). */
#ifndef EBB_STAGES_OPTIONS_H
#define EBB_STAGES_OPTIONS_H

#include <jansson.h>
#include <stddef.h>

typedef enum { EBB_OPT_NUM, EBB_OPT_INT, EBB_OPT_STR, EBB_OPT_BOOL } stg_opt_kind;

typedef struct stg_opt_def {
  const char *name;
  stg_opt_kind kind;
  double def, min, max; /* NUM, INT (BOOL: def 0 or 1) */
  const char *def_str;  /* STR */
  size_t offset;        /* of the value in the stage's struct */
} stg_opt_def;

/* Reads every option of defs[0..n) from opts (NULL: all defaults) into the
 * struct at out; see stage_opts_read above. */
int stg_stage_opts_read(const char *stage, const stg_opt_def *defs, size_t n, const json_t *opts,
                        void *out);

/* Parses options_json (NULL or "": *root NULL, all defaults) into *root
 * (caller json_decref, also on failure) and reads it as above: EBB_ECONFIG
 * "STAGE: options are not a JSON object ..." when it is not one. */
int stg_stage_opts_parse(const char *stage, const stg_opt_def *defs, size_t n,
                         const char *options_json, json_t **root, void *out);

#define EBB_OPT_S_(x) #x
#define EBB_OPT_STR_(x) EBB_OPT_S_(x)

/* struct members */
#define EBB_OPT_F_NUM_(name, def, lo, hi, desc) double name;
#define EBB_OPT_F_OPNUM_(name, def, lo, hi, desc) double name;
#define EBB_OPT_F_OPINT_(name, def, lo, hi, desc) int name;
#define EBB_OPT_F_FMT_(name, def, desc) const char *name;
#define EBB_OPT_F_INT_(name, def, lo, hi, desc) int name;
#define EBB_OPT_F_STR_(name, def, desc) const char *name;
#define EBB_OPT_F_BOOL_(name, def, desc) int name;
/* schema text */
#define EBB_OPT_J_BOUNDED_(name, type, trust, def, lo, hi, desc)        \
  "\"" #name "\": {\"type\": \"" type                                   \
  "\", \"default\": " EBB_OPT_STR_(def) ", \"minimum\": " EBB_OPT_STR_( \
      lo) ", \"maximum\": " EBB_OPT_STR_(hi) ", \"trust\": \"" trust    \
                                             "\", \"description\": \"" desc "\"}"
#define EBB_OPT_J_NUM_(name, def, lo, hi, desc) \
  EBB_OPT_J_BOUNDED_(name, "number", "job", def, lo, hi, desc)
#define EBB_OPT_J_INT_(name, def, lo, hi, desc) \
  EBB_OPT_J_BOUNDED_(name, "integer", "job", def, lo, hi, desc)
#define EBB_OPT_J_OPNUM_(name, def, lo, hi, desc) \
  EBB_OPT_J_BOUNDED_(name, "number", "operator", def, lo, hi, desc)
#define EBB_OPT_J_OPINT_(name, def, lo, hi, desc) \
  EBB_OPT_J_BOUNDED_(name, "integer", "operator", def, lo, hi, desc)
#define EBB_OPT_J_STR_(name, def, desc)                       \
  "\"" #name "\": {\"type\": \"string\", \"default\": \"" def \
  "\", \"trust\": \"job\", \"description\": \"" desc "\"}"
#define EBB_OPT_J_FMT_(name, fmt, def, desc)                                           \
  "\"" #name "\": {\"type\": \"string\", \"format\": \"" fmt "\", \"default\": \"" def \
  "\", \"trust\": \"operator\", \"description\": \"" desc "\"}"
#define EBB_OPT_J_PATH_(name, def, desc) EBB_OPT_J_FMT_(name, "path", def, desc)
#define EBB_OPT_J_URL_(name, def, desc) EBB_OPT_J_FMT_(name, "url", def, desc)
#define EBB_OPT_J_SECRET_(name, def, desc) EBB_OPT_J_FMT_(name, "secret", def, desc)
#define EBB_OPT_J_BOOL_(name, def, desc)                                     \
  "\"" #name "\": {\"type\": \"boolean\", \"default\": " EBB_OPT_BOOL_TEXT_( \
      def) ", \"trust\": \"job\", \"description\": \"" desc "\"}"
#define EBB_OPT_BOOL_TEXT_(def) EBB_OPT_BOOL_TEXT_##def##_
#define EBB_OPT_BOOL_TEXT_1_ "true"
#define EBB_OPT_BOOL_TEXT_0_ "false"
/* reader table */
#define EBB_OPT_D_NUM_(name, def, lo, hi, desc) \
  {#name, EBB_OPT_NUM, def, lo, hi, NULL, offsetof(stage_opts, name)},
#define EBB_OPT_D_INT_(name, def, lo, hi, desc) \
  {#name, EBB_OPT_INT, def, lo, hi, NULL, offsetof(stage_opts, name)},
#define EBB_OPT_D_STR_(name, def, desc) \
  {#name, EBB_OPT_STR, 0, 0, 0, def, offsetof(stage_opts, name)},
#define EBB_OPT_D_BOOL_(name, def, desc) \
  {#name, EBB_OPT_BOOL, def, 0, 1, NULL, offsetof(stage_opts, name)},
#define EBB_OPT_D_OPNUM_ EBB_OPT_D_NUM_
#define EBB_OPT_D_OPINT_ EBB_OPT_D_INT_
#define EBB_OPT_D_FMT_ EBB_OPT_D_STR_

#define EBB_STAGE_OPTIONS(LIST)                                                                    \
  typedef struct stage_opts {                                                                      \
    LIST(EBB_OPT_F_NUM_, EBB_OPT_F_INT_, EBB_OPT_F_STR_, EBB_OPT_F_BOOL_, , EBB_OPT_F_OPNUM_,      \
         EBB_OPT_F_OPINT_, EBB_OPT_F_FMT_, EBB_OPT_F_FMT_, EBB_OPT_F_FMT_)                         \
  } stage_opts;                                                                                    \
  static const char stage_opts_schema[] = "{" LIST(EBB_OPT_J_NUM_, EBB_OPT_J_INT_, EBB_OPT_J_STR_, \
                                                   EBB_OPT_J_BOOL_, ", ", EBB_OPT_J_OPNUM_,        \
                                                   EBB_OPT_J_OPINT_, EBB_OPT_J_PATH_,              \
                                                   EBB_OPT_J_URL_, EBB_OPT_J_SECRET_) "}";         \
  static const stg_opt_def stage_opts_defs[] = {                                                   \
      LIST(EBB_OPT_D_NUM_, EBB_OPT_D_INT_, EBB_OPT_D_STR_, EBB_OPT_D_BOOL_, , EBB_OPT_D_OPNUM_,    \
           EBB_OPT_D_OPINT_, EBB_OPT_D_FMT_, EBB_OPT_D_FMT_, EBB_OPT_D_FMT_)};                     \
  static inline int stage_opts_read(const char *stage, const json_t *opts, stage_opts *out) {      \
    return stg_stage_opts_read(stage, stage_opts_defs,                                             \
                               sizeof stage_opts_defs / sizeof stage_opts_defs[0], opts, out);     \
  }                                                                                                \
  static inline int stage_opts_parse(const char *stage, const char *options_json, json_t **root,   \
                                     stage_opts *out) {                                            \
    return stg_stage_opts_parse(stage, stage_opts_defs,                                            \
                                sizeof stage_opts_defs / sizeof stage_opts_defs[0], options_json,  \
                                root, out);                                                        \
  }

#endif
