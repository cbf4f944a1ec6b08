/*
 * fakenvml.h - the data of a fake NVML, shared by fakenvml.c and the
 * fakenvml_config.c that internal/fakehost generates for each fake host.
 */
#ifndef FAKEHOST_FAKENVML_H
#define FAKEHOST_FAKENVML_H

/* One fake GPU that NVML enumerates. A GPU device handle points at one of these. */
struct nvmlDevice_st {
    unsigned int index;
    unsigned int minor;
    const char *uuid;
    const char *name;
    int brand;               /* nvmlBrandType_t value */
    const char *busId;       /* "00000000:0F:00.0" */
    const char *busIdLegacy; /* "0000:0F:00.0" */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int function;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    int ccMajor;
    int ccMinor;
    unsigned long long memoryMiB;
    int persistence;         /* nvmlEnableState_t */
    int migCapable;
    int migCurrent;          /* NVML_DEVICE_MIG_ENABLE (1) or NVML_DEVICE_MIG_DISABLE (0) */
    int migPending;
    unsigned int maxMigDevices;   /* nvmlDeviceGetMaxMigDeviceCount: 0 unless in MIG mode */
    unsigned int migFirst;        /* its MIG devices: fakehost_mig_devices[migFirst, migFirst+migCount) */
    unsigned int migCount;
    unsigned int giFirst;         /* its GPU instances in fakehost_gpu_instances */
    unsigned int giCount;
    unsigned int profileFirst;    /* its GPU instance profiles in fakehost_gi_profiles */
    unsigned int profileCount;
};

/* A GPU instance profile (nvidia-smi mig -lgip). */
struct fakehostGIProfile {
    unsigned int index;      /* NVML_GPU_INSTANCE_PROFILE_* */
    unsigned int id;         /* profile id */
    unsigned int slices;
    unsigned int instances;
    unsigned int sm, ce, dec, enc, jpeg, ofa;
    unsigned long long memoryMiB;
};

/* A GPU instance. An nvmlGpuInstance_t points at one of these. */
struct nvmlGpuInstance_st {
    unsigned int parent;     /* index into fakehost_devices */
    unsigned int id;
    unsigned int profile;    /* index into fakehost_gi_profiles */
    unsigned int start, size; /* placement, in memory slices */
};

/* A MIG device: a compute instance. A MIG device handle points at one of these. */
struct fakehostMigDevice {
    unsigned int parent;     /* index into fakehost_devices */
    unsigned int index;      /* MIG index on the parent */
    const char *uuid;
    const char *name;
    unsigned int gpuInstance; /* index into fakehost_gpu_instances */
    unsigned int ciId;
    unsigned int ciSlices, ciStart;
    unsigned long long memoryMiB;
    unsigned int sm;
};

/* A compute instance handle (nvmlComputeInstance_t); one per MIG device, same index. */
struct nvmlComputeInstance_st {
    unsigned int mig;
};

/* A GPU the driver excluded (nvmlGetExcludedDeviceInfoByIndex). */
struct fakehostExcluded {
    const char *uuid;
    const char *busId;
    const char *busIdLegacy;
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
};

extern const char fakehost_driver_version[];  /* "550.54.15" */
extern const char fakehost_nvml_version[];    /* "12.550.54.15" */
extern const int fakehost_cuda_version;       /* 12040 */
extern const int fakehost_init_error;         /* nvmlInit* returns NVML_ERROR_DRIVER_NOT_LOADED */
extern const long long fakehost_init_delay_ns; /* nvmlInit* sleeps this long first */
extern const char fakehost_events_path[];     /* the NVML events file; "" for the default, next to the library */
/* Per-cgroup memory limits: 0 absent (not compiled in), 1 offered, 2 NOT_SUPPORTED; and where
 * they are stored (see fakenvml.c). */
extern const int fakehost_memory_limits;
extern const char fakehost_memory_limits_path[];
extern const unsigned int fakehost_gpu_count;
/* fakehost_gpu_count GPUs ordered by NVML index, then one unused element. */
extern struct nvmlDevice_st fakehost_devices[];
/* The other tables, each followed by one unused element. */
extern const unsigned int fakehost_mig_count;
extern struct fakehostMigDevice fakehost_mig_devices[];
extern struct nvmlComputeInstance_st fakehost_compute_instances[];
extern const unsigned int fakehost_gi_count;
extern struct nvmlGpuInstance_st fakehost_gpu_instances[];
extern const struct fakehostGIProfile fakehost_gi_profiles[];
extern const unsigned int fakehost_excluded_count;
extern const struct fakehostExcluded fakehost_excluded[];
/* A hash of all of the above; exported so that nvmlInit* can tell fake hosts apart. */
extern const char fakehost_nvml_config_id[] __attribute__((visibility("default")));

#endif
