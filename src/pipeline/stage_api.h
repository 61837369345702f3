/* The public stage ABI (ebb/stage.h) next to the device and memory rooms the
 * host side implements it with. */
#ifndef EBB_PIPELINE_STAGE_API_H
#define EBB_PIPELINE_STAGE_API_H

#include "ebb/stage.h"

#include "device/device.h"
#include "memory/memory.h"

#endif
