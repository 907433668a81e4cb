// The device operations the recorder's engine needs (the placement zone, zone.h; the capture
// writer, capture.h), as one C struct of function pointers that each backend's recorder fills
// with its vendor's calls (each backend's recorder/ folder, next to its interposers). The engine's
// sources call no vendor API; docs/design/native.md.
//
// Every int-returning operation returns the vendor's own status (0: success, as the vendors'
// status enums define it), so the engine can hand it back to the application unchanged. Handles
// (streams, events, pools, contexts) are the vendor's, carried as void *; device addresses as uint64_t.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mneme_device_ops {
    const char *api;           /* the vendor API's name, in the recorder's messages */
    const char *producer;      /* the recorder's name and version, in each snapshot's META */
    int status_out_of_memory;  /* the status of a failed allocation for lack of memory */
    int status_not_ready;      /* event_query's "not yet" */

    /* Fixed-address device memory: reserve a range, create physical memory, map it, allow access. */
    int (*current_device)(int *device);  /* fails when there is no current context/device */
    int (*granularity)(int device, size_t *bytes);
    int (*address_reserve)(uint64_t *got, size_t size, uint64_t at);
    void (*address_free)(uint64_t addr, size_t size);
    int (*mem_create)(uint64_t *handle, size_t size, int device);
    int (*mem_map)(uint64_t addr, size_t size, uint64_t handle);
    int (*mem_set_access)(uint64_t addr, size_t size, int device); /* read-write from `device` */
    void (*mem_unmap)(uint64_t addr, size_t size);
    void (*mem_release)(uint64_t handle);
    int (*mem_info)(size_t *free_bytes, size_t *total);

    /* Ordering. */
    int (*synchronize)(void);                  /* all work of the current context/device */
    void *(*current_context)(void);            /* NULL where the API has none (the device is the context) */
    void (*set_context)(void *context);        /* makes the writer thread's calls go to it */
    int (*stream_create)(void **stream);       /* non-blocking */
    int (*stream_synchronize)(void *stream);
    int (*stream_wait_event)(void *stream, void *event);
    int (*event_create)(void **event);         /* without timing */
    int (*event_record)(void *event, void *stream);
    int (*event_query)(void *event);           /* 0 done, status_not_ready, or an error */
    int (*event_synchronize)(void *event);
    void (*event_destroy)(void *event);

    /* Copies. */
    int (*host_alloc_pinned)(void **host, size_t size);
    int (*copy_to_host)(void *dst, uint64_t src, size_t size);
    int (*copy_to_host_async)(void *dst, uint64_t src, size_t size, void *stream);
    int (*copy_on_device_async)(uint64_t dst, uint64_t src, size_t size, void *stream);

    /* The recorder's own stream-ordered pool for shadows (outside the placed range). */
    int (*pool_create)(void **pool, int device);
    int (*pool_alloc_async)(uint64_t *ptr, size_t size, void *pool, void *stream);
    int (*free_async)(uint64_t ptr, void *stream);
    void (*pool_trim)(void *pool);
} mneme_device_ops;

/* A backend's table, from its functions named op_<field> (op_current_device, ...), in the struct's order. */
#define DEVICE_OPS_TABLE(api, producer, status_out_of_memory, status_not_ready)                              \
    {api, producer, status_out_of_memory, status_not_ready,                                                  \
     op_current_device, op_granularity, op_address_reserve, op_address_free, op_mem_create, op_mem_map,      \
     op_mem_set_access, op_mem_unmap, op_mem_release, op_mem_info,                                           \
     op_synchronize, op_current_context, op_set_context, op_stream_create, op_stream_synchronize,            \
     op_stream_wait_event, op_event_create, op_event_record, op_event_query, op_event_synchronize,           \
     op_event_destroy,                                                                                       \
     op_host_alloc_pinned, op_copy_to_host, op_copy_to_host_async, op_copy_on_device_async,                  \
     op_pool_create, op_pool_alloc_async, op_free_async, op_pool_trim}

#ifdef __cplusplus
}

namespace mneme_engine {
// The backend's operations: defined once by each recorder (its translation unit), used by the engine.
const mneme_device_ops &device_ops();
}  // namespace mneme_engine
#endif
