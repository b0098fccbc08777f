/*
 * The per-node state file shared by every process using the fake libnvidia-ml.so.1.
 *
 * Layout (little endian, x86_64 / aarch64 natural alignment, mirrored by fakegpu/nvml/state.py):
 *
 *   struct fgs_header                      (FGS_HEADER_SIZE bytes)
 *   struct fgs_gpu  x header.gpu_count     (each FGS_GPU_SIZE bytes)
 *
 * Every fgs_gpu has a static part (identity; never changes after rendering, covered by the
 * header checksum) and a dynamic part (MIG, faults, modes) that processes change at run time.
 *
 * Change protocol (store.c): a writer takes flock(LOCK_EX) on the file, computes the new
 * dynamic record privately, writes it with the target GPU and an optional event into the
 * header's journal, publishes the journal (journal_state = FGS_JOURNAL_READY), then applies it
 * under the seqlock (generation odd while applying) and clears the journal. A writer that dies
 * before publishing leaves the old record untouched; one that dies after publishing is finished
 * by the next lock holder (replay is idempotent). Readers copy records under the seqlock.
 */
#ifndef FAKEGPU_STATE_H
#define FAKEGPU_STATE_H

#include <stdint.h>

#define FGS_MAGIC "FAKEGPU"     /* 8 bytes with the NUL */
#define FGS_LAYOUT_VERSION 4u     /* 2: addressing_mode; 3: idle_sm_clock_mhz; 4: compute_mode, timeslice */

#define FGS_MAX_GPUS 256u
#define FGS_MAX_LINKS 36u       /* NVML_NVLINK_MAX_LINKS of the header we build with */
#define FGS_MAX_PROFILES 16u
#define FGS_MAX_PLACEMENTS 8u
#define FGS_MAX_GIS 8u
#define FGS_MAX_CIS 8u
#define FGS_EVENT_RING 64u
#define FGS_STR 96u

#define FGS_JOURNAL_EMPTY 0u
#define FGS_JOURNAL_READY 1u

/* event kinds stored in the ring (the NVML event type mask is stored alongside) */
struct fgs_event {
    uint32_t gpu;
    uint32_t gpu_instance_id;    /* 0xffffffff: whole GPU */
    uint32_t compute_instance_id;
    uint32_t pad;
    uint64_t event_type;         /* nvmlEventType* bit */
    uint64_t event_data;         /* XID number etc. */
};

struct fgs_link {
    uint32_t present;
    uint32_t remote_type;        /* nvmlIntNvLinkDeviceType_t: 0 GPU, 2 switch */
    uint32_t remote_gpu_index;   /* 0xffffffff unless a GPU on this node */
    uint32_t remote_domain;
    uint32_t remote_bus;
    uint32_t remote_device;
    uint32_t remote_function;
    uint32_t remote_pci_device_id;  /* combined device << 16 | vendor */
    char remote_node[64];
};

struct fgs_placement {
    uint32_t start;
    uint32_t size;
};

struct fgs_profile {
    uint32_t id;                 /* nvmlGpuInstanceProfileInfo.id, the id create takes */
    uint32_t nvml_profile;       /* NVML_GPU_INSTANCE_PROFILE_* index */
    uint32_t instance_count;
    uint32_t slice_count;        /* compute slices */
    uint32_t memory_slices;
    uint32_t sm_count;
    uint32_t copy_engines;
    uint32_t decoders;
    uint32_t encoders;
    uint32_t jpegs;
    uint32_t ofas;
    uint32_t placement_count;
    uint64_t memory_mib;
    char name[32];
    struct fgs_placement placements[FGS_MAX_PLACEMENTS];
};

struct fgs_gpu_static {
    uint32_t index;
    uint32_t minor;
    uint32_t module_id;
    uint32_t numa_node;
    char name[FGS_STR];
    char uuid[FGS_STR];
    char serial[32];
    char board_part_number[80];
    uint32_t architecture;       /* NVML_DEVICE_ARCH_* */
    uint32_t brand;              /* nvmlBrandType_t */
    uint32_t cc_major;
    uint32_t cc_minor;
    uint64_t memory_total;       /* bytes */
    uint64_t memory_reserved;    /* bytes */
    uint32_t pci_domain;
    uint32_t pci_bus;
    uint32_t pci_device;
    uint32_t pci_function;
    uint32_t pci_device_id;      /* combined device << 16 | vendor */
    uint32_t pci_subsystem_id;
    uint32_t sm_count;
    uint32_t power_limit_mw;
    uint32_t max_sm_clock_mhz;
    uint32_t max_mem_clock_mhz;
    uint32_t nvlink_version;
    uint32_t link_count;
    struct fgs_link links[FGS_MAX_LINKS];
    uint32_t fabric_present;
    uint32_t fabric_state;       /* NVML_GPU_FABRIC_STATE_* */
    uint8_t cluster_uuid[16];
    uint32_t clique_id;
    uint32_t mig_capable;
    uint32_t mig_memory_slices;
    uint32_t mig_compute_slices;
    uint32_t mig_max_gpu_instances;
    uint32_t profile_count;
    struct fgs_profile profiles[FGS_MAX_PROFILES];
    uint32_t addressing_mode;    /* nvmlDeviceAddressingModeType_t: ATS on Grace hosts, else NONE */
    uint32_t idle_sm_clock_mhz;  /* SM/graphics clock of an idle GPU; 0: not known, the max */
};

struct fgs_ci {
    uint32_t active;
    uint32_t id;
    uint32_t nvml_profile;       /* NVML_COMPUTE_INSTANCE_PROFILE_* */
    uint32_t start;
    uint32_t size;
    uint32_t pad;
};

struct fgs_gi {
    uint32_t active;
    uint32_t id;
    uint32_t profile_index;      /* into fgs_gpu_static.profiles */
    uint32_t start;              /* memory slice placement */
    uint32_t size;
    uint32_t pad;
    struct fgs_ci cis[FGS_MAX_CIS];
};

struct fgs_gpu_dynamic {
    uint32_t mig_current;
    uint32_t mig_pending;
    uint32_t persistence_mode;
    uint32_t lost;               /* fault gpu-lost */
    uint32_t fabric_degraded;    /* fault fabric-degraded */
    uint32_t last_xid;
    uint32_t compute_mode;       /* nvmlComputeMode_t; DEFAULT when rendered */
    uint32_t timeslice;          /* nvidia-smi compute-policy --set-timeslice: 0 DEFAULT .. 3 LONG */
    uint64_t link_down_mask;     /* fault nvlink-down, bit per link */
    uint64_t ecc_dbe_volatile;   /* fault ecc-dbe count */
    uint64_t xid_count;
    struct fgs_gi gis[FGS_MAX_GIS];
};

struct fgs_gpu {
    struct fgs_gpu_static s;
    struct fgs_gpu_dynamic d;
};

struct fgs_header {
    char magic[8];
    uint32_t layout_version;
    uint32_t header_size;        /* sizeof(struct fgs_header) */
    uint32_t gpu_size;           /* sizeof(struct fgs_gpu) */
    uint32_t gpu_count;
    uint64_t file_size;
    uint32_t checksum;           /* CRC-32 of the static bytes, see fgs_checksum() */
    uint32_t cuda_driver_version;
    char driver_version[80];
    char nvml_version[80];
    char topology[64];
    char node[64];
    /* ---- dynamic from here on (not covered by the checksum) ---- */
    uint64_t generation;         /* seqlock: odd while a change is being applied */
    uint64_t event_seq;          /* number of events ever posted */
    struct fgs_event events[FGS_EVENT_RING];
    uint32_t journal_state;
    uint32_t journal_gpu;
    uint32_t journal_has_event;
    uint32_t journal_event_seq;   /* event_seq when the journal was written */
    struct fgs_event journal_event;
    struct fgs_gpu_dynamic journal_dyn;
};

#define FGS_HEADER_STATIC_END offsetof(struct fgs_header, generation)

#endif
