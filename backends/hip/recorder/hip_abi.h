// The part of the HIP runtime's ABI (libamdhip64, ROCm 6) that Mneme's HIP recorder calls or
// interposes, declared here from AMD's documented signatures so the recorder builds without ROCm's
// headers (Debian's HIP 5.2 headers lay hipMemAllocationProp out differently from ROCm 6, whose
// layout, like CUDA's, is the one declared here). Every entry point is found at run time with
// dlsym: the recorder links no HIP library. docs/design/native.md, backends/hip/README.md.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int hipError_t;
enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNotFound = 500,
    hipErrorNotReady = 600,
};

typedef void *hipStream_t;
typedef void *hipEvent_t;
typedef void *hipMemPool_t;
typedef void *hipModule_t;
typedef void *hipFunction_t;
typedef void *hipDeviceptr_t;
typedef void *hipMemGenericAllocationHandle_t;

typedef struct {
    uint32_t x, y, z;
} hip_dim3;  // dim3

typedef struct {
    int type;  // hipMemLocationType: 1, a device
    int id;
} hipMemLocation;

typedef struct {
    int type;                 // hipMemAllocationType: 1, pinned (device) memory
    int requestedHandleType;  // hipMemAllocationHandleType: 0, none
    hipMemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType, gpuDirectRDMACapable;
        unsigned short usage;
    } allocFlags;
} hipMemAllocationProp;

typedef struct {
    hipMemLocation location;
    int flags;  // hipMemAccessFlags: 3, read-write
} hipMemAccessDesc;

typedef struct {
    int allocType;
    int handleTypes;
    hipMemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned char reserved[56];
} hipMemPoolProps;
enum { hipMemPoolAttrReleaseThreshold = 0x4 };  // hipMemPoolAttr: the bytes a pool keeps mapped through synchronizations

enum { hipMemcpyHostToHost = 0, hipMemcpyHostToDevice = 1, hipMemcpyDeviceToHost = 2, hipMemcpyDeviceToDevice = 3 };
enum { hipStreamNonBlocking = 1, hipEventDisableTiming = 2 };

// __hipRegisterFatBinary's argument: a wrapper around the clang offload bundle (plain or compressed).
typedef struct {
    uint32_t magic;  // 0x48495046, "HIPF"
    uint32_t version;
    const void *binary;
    const void *reserved;
} hip_fatbin_wrapper;

#define HIP_FATBIN_WRAPPER_MAGIC 0x48495046u

#ifdef __cplusplus
}
#endif
