/* bench_pitch: f0 quality of the pitch stage's analysis against aubio, on
 * generated songs with ground truth (songgen), in one run, plus speed.
 *
 * Clips: songgen seeds 1..N (default 6) of 20 s at 16 kHz, each as the vocal
 * stem alone and as the full mix (accompaniment at songgen's default level
 * 0.5 and at 0.25). Every estimator sees the same WAV files:
 *   ebb pyin / ebb yin   stg_pitch_analyze (CPU d'), hop 160, frame 1024
 *   aubio yinfft / yin   aubiopitch -i CLIP.wav -p yinfft|yin -B 1024 -H 160 -s -70
 * Metrics (MIREX melody style, per 10 ms truth frame, estimate taken at the
 * nearest estimate frame): RPA = truth-voiced frames whose estimate is voiced
 * and within 50 cents / truth-voiced frames; VR = truth-voiced frames with a
 * voiced estimate / truth-voiced; VFA = truth-unvoiced frames with a voiced
 * estimate / truth-unvoiced. Notes (ebb only): truth notes matched by an
 * estimated note with onset within 50 ms and the same MIDI number.
 * Speed: seconds of audio per second of wall time for the d' computation on
 * the CPU loop and on the GPU kernel's host twin (what the fake GPU runs),
 * the whole pYIN analysis, and aubiopitch (a subprocess: includes process
 * start and file reading).
 *
 * usage: bench_pitch [N_SEEDS] */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ebb/error.h"
#include "stages/audio/pitch.h"
#include "stages/audio/songgen.h"

#define SECONDS 20.0
#define NCOND 3
#define NEST 4

static const char *const cond_name[NCOND] = {"vocals only", "mix (accomp 0.25)",
                                             "mix (accomp 0.5)"};
static const double cond_gain[NCOND] = {0.0, 0.25, 0.5};
static const char *const est_name[NEST] = {"ebb pyin", "ebb yin", "aubio yinfft", "aubio yin"};

typedef struct score {
  double tv, ok, vr, tu, fa; /* frame counts */
  double notes, notes_hit;
} score;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* An estimate track: times and Hz (0 unvoiced), sorted by time. */
typedef struct track {
  double *t, *hz;
  size_t n;
} track;

static void track_free(track *tr) {
  free(tr->t);
  free(tr->hz);
  tr->t = tr->hz = NULL;
  tr->n = 0;
}

static double at(const track *tr, double t, size_t *hint) {
  size_t i = *hint;
  while (i + 1 < tr->n && fabs(tr->t[i + 1] - t) <= fabs(tr->t[i] - t))
    i++;
  *hint = i;
  return tr->n ? tr->hz[i] : 0.0;
}

static void score_frames(const stg_song *s, const track *tr, score *sc) {
  size_t hint = 0;
  for (size_t f = 0; f < s->n_f0; f++) {
    double th = s->f0_hz[f], eh = at(tr, f * s->f0_hop_s, &hint);
    if (th > 0) {
      sc->tv++;
      if (eh > 0) {
        sc->vr++;
        sc->ok += fabs(1200.0 * log2(eh / th)) < 50.0;
      }
    } else {
      sc->tu++;
      sc->fa += eh > 0;
    }
  }
}

static int run_aubio(const char *wav, const char *method, track *tr, double *secs) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "aubiopitch -i '%s' -p %s -B 1024 -H 160 -s -70 2>/dev/null", wav,
           method);
  double t0 = now();
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  size_t cap = 4096;
  tr->t = malloc(cap * sizeof *tr->t);
  tr->hz = malloc(cap * sizeof *tr->hz);
  tr->n = 0;
  double a, b;
  while (fscanf(p, "%lf %lf", &a, &b) == 2) {
    if (tr->n == cap) {
      cap *= 2;
      tr->t = realloc(tr->t, cap * sizeof *tr->t);
      tr->hz = realloc(tr->hz, cap * sizeof *tr->hz);
    }
    tr->t[tr->n] = a;
    tr->hz[tr->n] = b > 0 ? b : 0;
    tr->n++;
  }
  int rc = pclose(p);
  *secs += now() - t0;
  return rc == 0 && tr->n > 0 ? 0 : -1;
}

static int run_ebb(const stg_song *s, const float *x, stg_pitch_method m, track *tr,
                   score *sc) {
  stg_pitch_params p = stg_pitch_defaults();
  p.method = m;
  float *fr = NULL;
  size_t nf = 0;
  if (stg_pitch_analyze(x, s->frames, s->rate, &p, EBB_PITCH_BACKEND_CPU, &fr, &nf))
    return -1;
  tr->t = malloc(nf * sizeof *tr->t);
  tr->hz = malloc(nf * sizeof *tr->hz);
  tr->n = nf;
  for (size_t i = 0; i < nf; i++) {
    tr->t[i] = fr[3 * i];
    tr->hz[i] = fr[3 * i + 1];
  }
  stg_pitch_note *notes = NULL;
  size_t nn = 0;
  if (stg_pitch_notes(fr, nf, &p, &notes, &nn) == 0) {
    for (size_t i = 0; i < s->n_notes; i++) {
      int hit = 0;
      for (size_t j = 0; j < nn && !hit; j++)
        hit = fabs(notes[j].onset - s->notes[i].onset) <= 0.05 &&
              notes[j].midi == s->notes[i].midi;
      sc->notes++;
      sc->notes_hit += hit;
    }
  }
  free(notes);
  free(fr);
  return 0;
}

/* Speed of one backend on x: seconds of audio per second. */
static double speed_cmndf(const stg_song *s, stg_pitch_backend b) {
  stg_pitch_params p = stg_pitch_defaults();
  stg_pitch_geom g;
  float *pad = NULL;
  if (stg_pitch_geometry(&p, s->rate, s->frames, &g) || stg_pitch_pad(s->vocals, s->frames, &g,
                                                                        &pad))
    return 0;
  float *out = malloc(g.n_frames * (size_t)(g.tau_max + 1) * sizeof *out);
  double t0 = now();
  if (b == EBB_PITCH_BACKEND_TWIN)
    stg_pitch_cmndf_twin(pad, &g, out);
  else
    stg_pitch_cmndf_cpu(pad, &g, out);
  double dt = now() - t0;
  free(out);
  free(pad);
  return (double)s->frames / s->rate / dt;
}

int main(int argc, char **argv) {
  int nseeds = argc > 1 ? atoi(argv[1]) : 6;
  if (nseeds < 1 || nseeds > 100) {
    fprintf(stderr, "usage: bench_pitch [N_SEEDS 1..100]\n");
    return 2;
  }
  char dir[] = "/tmp/ebb_bench_pitch.XXXXXX";
  if (!mkdtemp(dir)) {
    fprintf(stderr, "bench_pitch: mkdtemp: %s\n", strerror(errno));
    return 1;
  }
  int have_aubio = system("command -v aubiopitch >/dev/null 2>&1") == 0;
  score sc[NCOND][NEST];
  memset(sc, 0, sizeof sc);
  double audio_s = 0, aubio_s = 0, t_pyin = 0, sp_cpu = 0, sp_twin = 0;
  int aubio_fail = 0;
  for (int seed = 1; seed <= nseeds; seed++) {
    for (int c = 0; c < NCOND; c++) {
      stg_songgen_params sp = stg_songgen_defaults();
      sp.seed = (uint64_t)seed;
      sp.seconds = SECONDS;
      sp.accomp_gain = c == 0 ? 0.5 : cond_gain[c];
      stg_song *s = NULL;
      if (stg_songgen_create(&sp, &s)) {
        fprintf(stderr, "bench_pitch: songgen: %s\n", ebb_errmsg());
        return 1;
      }
      const float *x = c == 0 ? s->vocals : s->mix;
      char wav[600];
      snprintf(wav, sizeof wav, "%s/clip%d_%d.wav", dir, seed, c);
      if (stg_wav_write_mono(wav, x, s->frames, s->rate)) {
        fprintf(stderr, "bench_pitch: %s\n", ebb_errmsg());
        return 1;
      }
      if (c == 0 && seed == 1) {
        sp_cpu = speed_cmndf(s, EBB_PITCH_BACKEND_CPU);
        sp_twin = speed_cmndf(s, EBB_PITCH_BACKEND_TWIN);
      }
      for (int e = 0; e < NEST; e++) {
        track tr = {0};
        if (e < 2) {
          double t0 = now();
          if (run_ebb(s, x, e == 0 ? EBB_PITCH_PYIN : EBB_PITCH_YIN, &tr, &sc[c][e])) {
            fprintf(stderr, "bench_pitch: pitch: %s\n", ebb_errmsg());
            return 1;
          }
          if (e == 0)
            t_pyin += now() - t0;
        } else if (!have_aubio || run_aubio(wav, e == 2 ? "yinfft" : "yin", &tr, &aubio_s)) {
          aubio_fail++;
          track_free(&tr);
          continue;
        }
        score_frames(s, &tr, &sc[c][e]);
        track_free(&tr);
      }
      audio_s += (double)s->frames / s->rate;
      remove(wav);
      stg_song_destroy(s);
    }
  }
  rmdir(dir);
  printf("bench_pitch: %d songgen clips x %.0f s at 16 kHz per condition (seeds 1..%d)\n",
         nseeds, SECONDS, nseeds);
  printf("aubio: aubiopitch -i CLIP.wav -p {yinfft|yin} -B 1024 -H 160 -s -70%s\n",
         have_aubio ? "" : "  (NOT FOUND: aubio rows empty)");
  printf("\n%-18s %-13s %7s %7s %7s %7s\n", "condition", "estimator", "RPA", "VR", "VFA",
         "notes");
  for (int c = 0; c < NCOND; c++)
    for (int e = 0; e < NEST; e++) {
      const score *q = &sc[c][e];
      if (q->tv == 0) {
        printf("%-18s %-13s %7s %7s %7s %7s\n", e ? "" : cond_name[c], est_name[e], "-", "-", "-",
               "-");
        continue;
      }
      char notes[16] = "-";
      if (q->notes > 0)
        snprintf(notes, sizeof notes, "%.3f", q->notes_hit / q->notes);
      printf("%-18s %-13s %7.3f %7.3f %7.3f %7s\n", e ? "" : cond_name[c], est_name[e],
             q->ok / q->tv, q->vr / q->tv, q->tu ? q->fa / q->tu : 0.0, notes);
    }
  printf("\nRPA: raw pitch accuracy (50 cents), VR: voicing recall, VFA: voicing false alarm,\n"
         "notes: truth notes found with onset within 50 ms and the exact MIDI number.\n");
  double pyin_audio = audio_s; /* every clip went through pyin once */
  printf("\nspeed (seconds of audio per second, one core):\n");
  printf("  d' CPU loop (8-lane)             %8.1f x\n", sp_cpu);
  printf("  d' GPU kernel's host twin        %8.1f x   (CPU / twin = %.2f)\n", sp_twin,
         sp_twin > 0 ? sp_cpu / sp_twin : 0.0);
  printf("  ebb pyin, whole analysis (CPU)   %8.1f x\n", t_pyin > 0 ? pyin_audio / t_pyin : 0.0);
  if (have_aubio && aubio_s > 0)
    printf("  aubiopitch (subprocess, 2 runs)  %8.1f x\n", 2.0 * audio_s / aubio_s);
  printf("  GPU kernel on a real device: not measured here (needs a CUDA device)\n");
  if (aubio_fail)
    printf("\n%d aubio runs failed or were skipped\n", aubio_fail);
  return 0;
}
