/* pitch: where `separate` took the melody out of the vocals whole, the
 * salience takes the mix's (option salience_mix, stg_pitch_salience_fill).
 *
 * - The rule itself: only unvoiced frames in a hole of at most gap_frames
 *   between voiced frames, and only where the vocals are between ratio_db
 *   and silent_db under the mix for min_frames in a row; never before the
 *   first voiced frame or after the last.
 * - The stage: a songgen song whose vocal stem holds only the mix 23 dB down
 *   for 0.8 s in the middle of a phrase (what REPET leaves where it takes a
 *   melody note that doubles a chord tone) is still followed there from the
 *   mix (with salience_mix_silent_db 30), and not with salience_mix 0,
 *   without an "audio" item, or with the default silent_db (20: a rest).
 *   The note gate must judge those frames by the mix's level: by the vocals'
 *   own (23 dB down) it drops them again. */
#include <jansson.h>
#include <math.h>

#include "stages/audio/pitch.h"
#include "stages/audio/songgen.h"
#include "stages_pitch_host.h"
#include "test.h"

#define NB 3
#define HOP 4
#define WIN 1 /* the frame centre sample alone */

/* rows: voiced (sum 1) where v[f] is 'V', unvoiced (sum 0.1) elsewhere;
 * the mix's rows are {0, 1, 0}; the vocals are 14 dB under the mix where
 * quiet[f] is '.', 40 dB under it where it is 's' (silent), as loud as it
 * elsewhere */
static void setup(const char *v, const char *quiet, float *sal, float *msal, float *x, float *mix,
                  size_t nf) {
  for (size_t f = 0; f < nf; f++) {
    for (int k = 0; k < NB; k++) {
      sal[f * NB + k] = v[f] == 'V' ? (k == 0 ? 1.0f : 0.0f) : (k == 2 ? 0.1f : 0.0f);
      msal[f * NB + k] = k == 1 ? 1.0f : 0.0f;
    }
    for (int i = 0; i < HOP; i++) {
      mix[f * HOP + i] = 1.0f;
      x[f * HOP + i] = quiet[f] == '.' ? 0.2f : quiet[f] == 's' ? 0.01f : 1.0f;
    }
  }
}

/* "F" where row f was replaced by weight x the mix's row, "-" where not */
static void filled(const float *sal, size_t nf, char *out) {
  for (size_t f = 0; f < nf; f++)
    out[f] = fabsf(sal[f * NB + 1] - 0.3f) < 1e-6f ? 'F' : '-';
  out[nf] = 0;
}

static void check_fill(const char *v, const char *quiet, size_t gap, double db, size_t min_run,
                       const char *want) {
  size_t nf = strlen(v);
  float sal[64 * NB] = {0}, msal[64 * NB] = {0}, x[64 * HOP] = {0}, mix[64 * HOP] = {0};
  char got[65], flags[65];
  unsigned char fl[64];
  setup(v, quiet, sal, msal, x, mix, nf);
  stg_pitch_fill fp = {.weight = 0.3,
                       .ratio_db = db,
                       .silent_db = 20.0,
                       .gap_frames = gap,
                       .min_frames = min_run,
                       .hop = HOP,
                       .win = WIN};
  size_t k = stg_pitch_salience_fill(sal, msal, nf, NB, x, mix, nf * HOP, &fp, fl);
  filled(sal, nf, got);
  for (size_t f = 0; f < nf; f++)
    flags[f] = fl[f] ? 'F' : '-';
  flags[nf] = 0;
  CHECK_MSG(!strcmp(got, want),
            "voiced %s quiet %s gap %zu, %g dB, runs of %zu: filled %s, "
            "want %s",
            v, quiet, gap, db, min_run, got, want);
  CHECK_MSG(!strcmp(flags, want), "the filled flags say %s, want %s", flags, want);
  size_t nwant = 0;
  for (const char *c = want; *c; c++)
    nwant += *c == 'F';
  CHECK_EQ_U64(k, nwant);
}

static void test_fill_rule(void) {
  /* a 4-frame hole; frame 5 is as loud as the mix (separate kept it) */
  check_fill("VVV----V----", ".....L......", 4, 8, 1, "---FF-F-----");
  /* the hole is longer than the gap allowed: nothing */
  check_fill("VVV----V----", "............", 3, 8, 1, "------------");
  /* the vocals are 14 dB under the mix: a 25 dB ratio asks for more */
  check_fill("VVV----V----", "............", 4, 25, 1, "------------");
  /* before the first voiced frame and after the last: never */
  check_fill("--VV--VV--", "..........", 8, 8, 1, "----FF----");
  /* no voiced frame at all: nothing */
  check_fill("------", "......", 8, 8, 1, "------");
  /* a voiced frame stays itself even where the vocals are quiet */
  check_fill("V-V", "...", 8, 8, 1, "-F-");
  /* 40 dB under the mix (more than silent_db, 20): a rest, not filled */
  check_fill("VV----VV", "...s....", 8, 8, 1, "--F-FF--");
  /* runs of quiet frames shorter than min_frames (the gap between two
   * notes) are not filled: here the one-frame run before the loud frame */
  check_fill("VV-----VV", "...L.....", 8, 8, 2, "----FFF--");
  check_fill("VV-----VV", "...L.....", 8, 8, 4, "---------");
}

/* --- the stage on a song whose vocals lose 0.8 s of a phrase ------------------ */

typedef struct hole_result {
  double rpa; /* of the truth-voiced frames in the hole, tracked within 50 cents */
  size_t tv;  /* truth-voiced frames in the hole */
  char log[16384];
} hole_result;

static hole_result run_hole(const stg_song *s, double a, double b, const char *opts, int with_mix) {
  hole_result r = {0};
  float *v = malloc(s->frames * sizeof *v);
  memcpy(v, s->vocals, s->frames * sizeof *v);
  for (uint64_t i = (uint64_t)(a * s->rate); i < (uint64_t)(b * s->rate) && i < s->frames; i++)
    v[i] = 0.07f * s->mix[i]; /* what REPET leaves: everything, 23 dB down */
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  ebb_items in = {0}, out = {0};
  REQUIRE(th_add_audio(&in, "vocals", v, s->frames, 1, s->rate) == 0);
  if (with_mix)
    REQUIRE(th_add_audio(&in, "audio", s->mix, s->frames, 1, s->rate) == 0);
  int rc = th_run_stage(&t, &stg_stage_pitch, opts, &in, &out);
  CHECK_MSG(rc == 0, "pitch %s: %d (%s)", opts, rc, t.err);
  ebb_item_info f0;
  if (rc == 0 && th_item_find(&out, "f0", &f0) == 0) {
    const float *fr = f0.data;
    size_t nf = f0.shape[0], ok = 0;
    for (size_t i = 0; i < s->n_f0 && i < nf; i++) {
      double ts = (double)i * s->f0_hop_s;
      if (ts < a || ts >= b || !(s->f0_hz[i] > 0))
        continue;
      r.tv++;
      ok += fr[3 * i + 1] > 0 && fabs(1200.0 * log2(fr[3 * i + 1] / s->f0_hz[i])) < 50.0;
    }
    r.rpa = r.tv ? (double)ok / (double)r.tv : 0.0;
  }
  snprintf(r.log, sizeof r.log, "%s", t.log);
  th_items_free(&in);
  th_items_free(&out);
  free(v);
  return r;
}

static void test_fill_stage(void) {
  stg_songgen_params sp = stg_songgen_defaults();
  sp.seed = 1;
  sp.seconds = 12.0;
  sp.accomp_gain = 0.5;
  stg_song *s = NULL;
  REQUIRE(stg_songgen_create(&sp, &s) == 0);
  /* 0.8 s inside the first phrase that has that much left after 0.3 s */
  double a = -1.0;
  for (size_t i = 0; i + 1 < s->n_notes && a < 0; i++) {
    size_t j = i;
    while (j + 1 < s->n_notes && s->notes[j + 1].line == s->notes[i].line)
      j++;
    if (s->notes[j].offset - s->notes[i].onset >= 1.4)
      a = s->notes[i].onset + 0.3;
  }
  REQUIRE(a > 0);
  double b = a + 0.8;
  /* 23 dB down is past the default salience_mix_silent_db (20: a rest) */
  const char *on_opts = "{\"salience_mix_silent_db\": 30}";
  hole_result on = run_hole(s, a, b, on_opts, 1);
  hole_result off = run_hole(s, a, b, "{\"salience_mix\": 0}", 1);
  hole_result nomix = run_hole(s, a, b, on_opts, 0);
  hole_result rest = run_hole(s, a, b, "{}", 1);
  fprintf(stderr,
          "  hole %.2f-%.2f s (%zu voiced frames): RPA %.2f with the mix's salience, "
          "%.2f with salience_mix 0, %.2f without \"audio\", %.2f as a rest (silent_db 20)\n",
          a, b, on.tv, on.rpa, off.rpa, nomix.rpa, rest.rpa);
  CHECK_MSG(on.tv >= 50, "only %zu truth-voiced frames in the hole", on.tv);
  CHECK_MSG(on.rpa >= 0.7,
            "the mix's salience did not carry the melody through the hole: "
            "RPA %.2f < 0.7 (log:\n%s)",
            on.rpa, on.log);
  CHECK_MSG(off.rpa <= 0.3, "salience_mix 0 still tracked the hole: RPA %.2f", off.rpa);
  CHECK_MSG(nomix.rpa <= 0.3, "no \"audio\" item, yet the hole was tracked: RPA %.2f", nomix.rpa);
  CHECK_MSG(rest.rpa <= 0.3,
            "23 dB under the mix is a rest by default, yet the hole was "
            "tracked: RPA %.2f",
            rest.rpa);
  CHECK_MSG(strstr(on.log, "take the mix's salience") != NULL,
            "no log line says how many frames "
            "took the mix's salience:\n%s",
            on.log);
  stg_song_destroy(s);
}

static void test_fill_options(void) {
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  void *st = NULL;
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base, "{\"salience_mix\": 1.5}", &st), EBB_ECONFIG);
  CHECK_MSG(strstr(t.err, "salience_mix") != NULL, "error does not name the option: %s", t.err);
  th_init(&t, EBB_DEV_KIND_CPU);
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base, "{\"salience_mix_gap_ms\": -1}", &st), EBB_ECONFIG);
  CHECK_MSG(strstr(t.err, "salience_mix_gap_ms") != NULL, "error does not name the option: %s",
            t.err);
  th_init(&t, EBB_DEV_KIND_CPU);
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base, "{\"salience_mix_silent_db\": 300}", &st),
               EBB_ECONFIG);
  CHECK_MSG(strstr(t.err, "salience_mix_silent_db") != NULL, "error does not name the option: %s",
            t.err);
  /* a range with nothing in it */
  th_init(&t, EBB_DEV_KIND_CPU);
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base, "{\"salience_mix_db\": 25}", &st), EBB_ECONFIG);
  CHECK_MSG(strstr(t.err, "salience_mix_db 25") && strstr(t.err, "salience_mix_silent_db 20"),
            "error does not name both options: %s", t.err);
  th_init(&t, EBB_DEV_KIND_CPU);
  st = NULL;
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base, "{\"salience_mix_db\": 25, \"salience_mix\": 0}", &st),
               0);
  if (st)
    stg_stage_pitch.unload(&t.base, st);
}

int main(void) {
  RUN(test_fill_rule);
  RUN(test_fill_stage);
  RUN(test_fill_options);
  return TEST_END();
}
