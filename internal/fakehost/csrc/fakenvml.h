/*
 * fakenvml.h - the data of a fake NVML, shared by fakenvml.c and the
 * fakenvml_config.c that internal/fakehost generates for each fake host.
 */
#ifndef FAKEHOST_FAKENVML_H
#define FAKEHOST_FAKENVML_H

/* One fake GPU. A device handle points at one of these. */
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
};

extern const char fakehost_driver_version[];  /* "550.54.15" */
extern const char fakehost_nvml_version[];    /* "12.550.54.15" */
extern const int fakehost_cuda_version;       /* 12040 */
extern const int fakehost_init_error;         /* nvmlInit* returns NVML_ERROR_DRIVER_NOT_LOADED */
extern const long long fakehost_init_delay_ns; /* nvmlInit* sleeps this long first */
extern const unsigned int fakehost_gpu_count;
/* fakehost_gpu_count GPUs ordered by NVML index, then one unused element. */
extern struct nvmlDevice_st fakehost_devices[];
/* A hash of all of the above; exported so that nvmlInit* can tell fake hosts apart. */
extern const char fakehost_nvml_config_id[] __attribute__((visibility("default")));

#endif
