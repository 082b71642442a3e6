// fusetune_status_name, the names of c_api.h's status codes: its own file, with nothing but the
// C header, so the Hopper dev library (kernels/cuda/dev/build_hopper_dev.sh, nvcc alone) serves
// the same names as libfusetune_capi.so.
#include "fusetune/c_api.h"

extern "C" const char* fusetune_status_name(int status) {
  switch (status) {
    case FUSETUNE_OK: return "OK";
    case FUSETUNE_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case FUSETUNE_NOT_FOUND: return "NOT_FOUND";
    case FUSETUNE_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case FUSETUNE_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case FUSETUNE_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case FUSETUNE_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case FUSETUNE_INTERNAL: return "INTERNAL";
    case FUSETUNE_UNAVAILABLE: return "UNAVAILABLE";
    case FUSETUNE_DATA_LOSS: return "DATA_LOSS";
    default: return "UNKNOWN";
  }
}
