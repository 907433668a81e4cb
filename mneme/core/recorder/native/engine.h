// The vendor-neutral part of Mneme's native recorders, header-only (with the snapshot writer,
// mneme/core/snapshot/native, on the include path): each backend's recorder
// (backends/<name>/recorder) includes it and adds its device API layer (interposition, device
// memory, module and launch handling). Everything is in namespace mneme_engine; the recorder is
// built with hidden visibility, so none of it is exported. docs/design/native.md.
#pragma once

#include "annotations.h"
#include "clock.h"
#include "config.h"
#include "counts.h"
#include "files.h"
#include "hash.h"
#include "intervals.h"
#include "json.h"
#include "log.h"
#include "lz4_block.h"
#include "manifest.h"
#include "snapshot_options.h"
// Reach the device through the backend's device_ops() (device_ops.h), which it defines once.
#include "exclusive.h"
#include "capture.h"
#include "zone.h"
#include "record.h"  // the record of one launch, around the backend's own launch
