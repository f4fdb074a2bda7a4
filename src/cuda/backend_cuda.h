/* cuda/backend_cuda.h: what the CUDA backend (backend_cuda.c) shows the other files of src/cuda
 * about its devices and events: a device's GPU index and streams, an event's cudaEvent_t (as void
 * pointers: no CUDA types here), and the NCCL communication table (nccl_transfer.c, in builds with
 * NCCL) that the backend table points to. Nothing outside src/cuda includes it. */
#ifndef BT_CUDA_BACKEND_CUDA_H
#define BT_CUDA_BACKEND_CUDA_H

#include "backend/backend.h"

/* N of cuda:N. */
int bt_cuda_device_index(bt_device *dev);
/* The cudaStream_t of one of dev's streams. */
void *bt_cuda_stream(bt_device *dev, bt_stream_id stream);
/* The cudaEvent_t of ev. */
void *bt_cuda_event_handle(bt_event *ev);

#ifdef BATON_HAVE_NCCL
extern const bt_backend_comms bt_cuda_nccl_comms;
#endif

#endif
