/* The re-attack model of the pitch stage (pitch.h): a multilayer perceptron
 * with one hidden layer of tanh units on the features pitch_onsets.c builds
 * for an onset peak inside a note, giving the log-odds that the peak is the
 * attack of a new note of the same pitch. Its weights are in
 * pitch_reattack_model.h, written by bench/train_reattack.py; why a model
 * and how it was chosen and checked: docs/songtrace.md, pitch step 7. */
#include <math.h>

#include "stages/audio/pitch.h"
#include "stages/audio/pitch_reattack_model.h"

_Static_assert(sizeof stg_reattack_mu / sizeof stg_reattack_mu[0] == EBB_PITCH_REATTACK_NFEAT,
               "the model's feature count is not pitch_onsets.c's");
_Static_assert(sizeof stg_reattack_w1 / sizeof stg_reattack_w1[0] ==
                   EBB_PITCH_REATTACK_NFEAT * EBB_REATTACK_HIDDEN,
               "the model's first layer has the wrong shape");

double stg_pitch_reattack_logit(const float *x) {
  double z[EBB_PITCH_REATTACK_NFEAT], out = stg_reattack_b2;
  for (int i = 0; i < EBB_PITCH_REATTACK_NFEAT; i++)
    z[i] = ((double)x[i] - stg_reattack_mu[i]) / stg_reattack_sd[i];
  for (int j = 0; j < EBB_REATTACK_HIDDEN; j++) {
    double s = stg_reattack_b1[j];
    for (int i = 0; i < EBB_PITCH_REATTACK_NFEAT; i++)
      s += z[i] * stg_reattack_w1[i * EBB_REATTACK_HIDDEN + j];
    out += tanh(s) * stg_reattack_w2[j];
  }
  return out;
}

void stg_pitch_reattack_check(double *got, double *want) {
  float x[EBB_PITCH_REATTACK_NFEAT];
  for (int i = 0; i < EBB_PITCH_REATTACK_NFEAT; i++)
    x[i] = (float)stg_reattack_check_x[i];
  *got = stg_pitch_reattack_logit(x);
  *want = stg_reattack_check_logit;
}
