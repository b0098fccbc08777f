/* A view of some of the node's GPUs (issue 13): what a container given some devices sees.
 * FAKEGPU_NVML_VISIBLE lists GPU and MIG UUIDs (comma-separated, like NVIDIA_VISIBLE_DEVICES);
 * a GPU is shown when its UUID or one of its MIG devices' UUIDs is listed, renumbered from 0
 * in the node's order; of its MIG devices only the listed ones (all when the GPU's own UUID is
 * listed), as NVIDIA's container runtime gives a container only its MIG devices' capabilities.
 * FAKEGPU_NVML_VISIBLE_<anything> variables add to the list (a CDI spec sets one per device,
 * so a container sees the union of the devices it was given; "none" lists nothing). Unset,
 * empty (or "all"): every GPU, as before. */
#ifndef FAKEGPU_VISIBLE_H
#define FAKEGPU_VISIBLE_H

#include <stdint.h>

#define FG_VISIBLE_ENV "FAKEGPU_NVML_VISIBLE"

void fg_view_open(void);                          /* at nvmlInit, after the store opened */
uint32_t fg_view_count(void);                     /* GPUs in the view */
int fg_view_gpu(uint32_t index, uint32_t *gpu);   /* view index -> GPU; 0: no such index */
int fg_view_shows(uint32_t gpu);                  /* is the node's GPU in the view */
/* is the MIG device (GPU instance id, compute instance id) of the GPU in the view */
int fg_view_shows_mig(uint32_t gpu, uint32_t gi_id, uint32_t ci_id);
/* the same by the instances' slots in the GPU's dynamic state */
int fg_view_shows_mig_slot(uint32_t gpu, uint32_t gi_slot, uint32_t ci_slot);
/* the GPU's index in the view; ``node_index`` (its index on the node) without a view */
uint32_t fg_view_index(uint32_t gpu, uint32_t node_index);

#endif
