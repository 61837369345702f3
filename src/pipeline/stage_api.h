/* Includes the public stage ABI (ebb/stage.h) next to the internal device
 * layer. Both name something `ebb_device_kind` (stage.h: an inline wrapper for
 * stage authors; device.h: the device-kind enum), so the wrapper is renamed
 * while stage.h is read. Host-side files include this instead of ebb/stage.h
 * whenever they also need device/ or memory/. */
#ifndef EBB_PIPELINE_STAGE_API_H
#define EBB_PIPELINE_STAGE_API_H

#define ebb_device_kind ebb_stage_device_kind_wrapper_
#include "ebb/stage.h"
#undef ebb_device_kind

#include "device/device.h"
#include "memory/memory.h"

#endif
