/* The public stage ABI (ebb/stage.h) together with the internal device and
 * memory rooms: what every host-side file of the pipeline room includes. */
#ifndef EBB_PIPELINE_STAGE_API_H
#define EBB_PIPELINE_STAGE_API_H

#include "ebb/stage.h"

#include "device/device.h"
#include "memory/memory.h"

#endif
