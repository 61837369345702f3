/* Stage option tables: a stage writes each option once, as one row of a
 * list macro (name, default, bounds, description), and gets from it both
 * the JSON schema text of ebb_stage.options_schema and the C values it
 * loads with, so a default or a bound cannot say one thing in the schema
 * and another in the code.
 *
 *   #define MY_OPTIONS(NUM, INT, STR, BOOL, SEP)                          \
 *     NUM(gain, 0.5, 0, 4, "linear gain") SEP                            \
 *     INT(hop, 256, 1, 65536, "STFT hop in samples") SEP                 \
 *     STR(mode, "fast", "fast or exact") SEP                              \
 *     BOOL(hpss, 1, "apply the harmonic mask")
 *   EBB_STAGE_OPTIONS(MY_OPTIONS)
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
 * bounds within int), STR "string", BOOL "boolean" (default 1 or 0). */
#ifndef EBB_STAGES_OPTIONS_H
#define EBB_STAGES_OPTIONS_H

#include <jansson.h>
#include <stddef.h>

typedef enum { EBB_OPT_NUM, EBB_OPT_INT, EBB_OPT_STR, EBB_OPT_BOOL } ebb_opt_kind;

typedef struct ebb_opt_def {
  const char *name;
  ebb_opt_kind kind;
  double def, min, max; /* NUM, INT (BOOL: def 0 or 1) */
  const char *def_str;  /* STR */
  size_t offset;        /* of the value in the stage's struct */
} ebb_opt_def;

/* Reads every option of defs[0..n) from opts (NULL: all defaults) into the
 * struct at out; see stage_opts_read above. */
int ebb_stage_opts_read(const char *stage, const ebb_opt_def *defs, size_t n, const json_t *opts,
                        void *out);

/* Parses options_json (NULL or "": *root NULL, all defaults) into *root
 * (caller json_decref, also on failure) and reads it as above: EBB_ECONFIG
 * "STAGE: options are not a JSON object ..." when it is not one. */
int ebb_stage_opts_parse(const char *stage, const ebb_opt_def *defs, size_t n,
                         const char *options_json, json_t **root, void *out);

#define EBB_OPT_S_(x) #x
#define EBB_OPT_STR_(x) EBB_OPT_S_(x)

/* struct members */
#define EBB_OPT_F_NUM_(name, def, lo, hi, desc) double name;
#define EBB_OPT_F_INT_(name, def, lo, hi, desc) int name;
#define EBB_OPT_F_STR_(name, def, desc) const char *name;
#define EBB_OPT_F_BOOL_(name, def, desc) int name;
/* schema text */
#define EBB_OPT_J_BOUNDED_(name, type, def, lo, hi, desc)                                         \
  "\"" #name "\": {\"type\": \"" type "\", \"default\": " EBB_OPT_STR_(def)                       \
  ", \"minimum\": " EBB_OPT_STR_(lo) ", \"maximum\": " EBB_OPT_STR_(hi)                           \
  ", \"description\": \"" desc "\"}"
#define EBB_OPT_J_NUM_(name, def, lo, hi, desc) EBB_OPT_J_BOUNDED_(name, "number", def, lo, hi, desc)
#define EBB_OPT_J_INT_(name, def, lo, hi, desc) EBB_OPT_J_BOUNDED_(name, "integer", def, lo, hi, desc)
#define EBB_OPT_J_STR_(name, def, desc)                                                           \
  "\"" #name "\": {\"type\": \"string\", \"default\": \"" def "\", \"description\": \"" desc "\"}"
#define EBB_OPT_J_BOOL_(name, def, desc)                                                          \
  "\"" #name "\": {\"type\": \"boolean\", \"default\": " EBB_OPT_BOOL_TEXT_(def)                  \
  ", \"description\": \"" desc "\"}"
#define EBB_OPT_BOOL_TEXT_(def) EBB_OPT_BOOL_TEXT_##def##_
#define EBB_OPT_BOOL_TEXT_1_ "true"
#define EBB_OPT_BOOL_TEXT_0_ "false"
/* reader table */
#define EBB_OPT_D_NUM_(name, def, lo, hi, desc)                                                   \
  {#name, EBB_OPT_NUM, def, lo, hi, NULL, offsetof(stage_opts, name)},
#define EBB_OPT_D_INT_(name, def, lo, hi, desc)                                                   \
  {#name, EBB_OPT_INT, def, lo, hi, NULL, offsetof(stage_opts, name)},
#define EBB_OPT_D_STR_(name, def, desc) {#name, EBB_OPT_STR, 0, 0, 0, def, offsetof(stage_opts, name)},
#define EBB_OPT_D_BOOL_(name, def, desc) {#name, EBB_OPT_BOOL, def, 0, 1, NULL, offsetof(stage_opts, name)},

#define EBB_STAGE_OPTIONS(LIST)                                                                   \
  typedef struct stage_opts {                                                                     \
    LIST(EBB_OPT_F_NUM_, EBB_OPT_F_INT_, EBB_OPT_F_STR_, EBB_OPT_F_BOOL_, )                       \
  } stage_opts;                                                                                   \
  static const char stage_opts_schema[] =                                                         \
      "{" LIST(EBB_OPT_J_NUM_, EBB_OPT_J_INT_, EBB_OPT_J_STR_, EBB_OPT_J_BOOL_, ", ") "}";        \
  static const ebb_opt_def stage_opts_defs[] = {                                                  \
      LIST(EBB_OPT_D_NUM_, EBB_OPT_D_INT_, EBB_OPT_D_STR_, EBB_OPT_D_BOOL_, )};                   \
  static inline int stage_opts_read(const char *stage, const json_t *opts, stage_opts *out) {     \
    return ebb_stage_opts_read(stage, stage_opts_defs,                                            \
                               sizeof stage_opts_defs / sizeof stage_opts_defs[0], opts, out);    \
  }                                                                                               \
  static inline int stage_opts_parse(const char *stage, const char *options_json, json_t **root,  \
                                     stage_opts *out) {                                           \
    return ebb_stage_opts_parse(stage, stage_opts_defs,                                           \
                                sizeof stage_opts_defs / sizeof stage_opts_defs[0], options_json, \
                                root, out);                                                       \
  }

#endif
