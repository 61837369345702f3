/* The host twin of the pitch_cmndf kernel (pitch.cu): same parameters, same
 * float32 arithmetic, one call per launch looping over blocks and threads. */
#ifndef EBB_STAGES_KERNELS_PITCH_TWIN_H
#define EBB_STAGES_KERNELS_PITCH_TWIN_H

#include "device/kernel_twin.h"

/* params: {const float **x, float **out, int *n_frames, int *hop, int *w, int *tau_max} */
void fakegpu_twin_pitch_cmndf(const dev_launch_dims *dims, void **params);

#endif
