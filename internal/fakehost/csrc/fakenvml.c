/*
 * fakenvml.c - a fake libnvidia-ml.so for gpu-runtime's tests.
 *
 * internal/fakehost compiles this file once per process and links it, per fake host, with a
 * generated fakenvml_config.c that defines the data declared in fakenvml.h (driver and CUDA
 * versions, the GPUs, whether and how nvmlInit fails), so each host's data is baked into its
 * library.
 *
 * The NVML types below are declared with the same layout as NVIDIA's nvml.h (as shipped with
 * github.com/NVIDIA/go-nvml v0.13.3-1); only the few this library needs are declared. Device
 * handles are pointers into the static fakehost_devices array.
 *
 * One process can only ever use one fake NVML: go-nvml calls NVML through symbols of the
 * program that the dynamic linker binds, on first call, to the first libnvidia-ml loaded
 * RTLD_GLOBAL, and that library can then never be unloaded. Calls meant for a fake NVML loaded
 * later still land in the first. So that this never passes silently, nvmlInit* fails with
 * NVML_ERROR_UNKNOWN and a message on stderr when a fake NVML built for a different host is
 * also loaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakenvml.h"

#define API __attribute__((visibility("default")))

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef enum nvmlEnableState_enum {
    NVML_FEATURE_DISABLED = 0,
    NVML_FEATURE_ENABLED = 1
} nvmlEnableState_t;

/* Values are the real nvmlBrandType_t ones; the fake passes them through. */
typedef int nvmlBrandType_t;

typedef unsigned int nvmlDeviceArchitecture_t;

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct {
    struct nvmlDevice_st *handle;
} nvmlDevice_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int refcount;

static int initialized(void)
{
    pthread_mutex_lock(&lock);
    int ok = refcount > 0;
    pthread_mutex_unlock(&lock);
    return ok;
}

/* lookup returns the device behind a handle, or NULL for a handle this library never gave out. */
static const struct nvmlDevice_st *lookup(nvmlDevice_t device)
{
    uintptr_t p = (uintptr_t)device.handle;
    uintptr_t first = (uintptr_t)&fakehost_devices[0];
    uintptr_t end = (uintptr_t)&fakehost_devices[fakehost_gpu_count];
    if (p < first || p >= end || (p - first) % sizeof(fakehost_devices[0]) != 0) {
        return NULL;
    }
    return device.handle;
}

/* copyString copies s into buf of length bytes, NUL included. */
static nvmlReturn_t copyString(char *buf, unsigned int length, const char *s)
{
    if (buf == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    size_t n = strlen(s);
    if ((size_t)length < n + 1) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

#define CHECK_INIT()                          \
    do {                                      \
        if (!initialized()) {                 \
            return NVML_ERROR_UNINITIALIZED;  \
        }                                     \
    } while (0)

#define CHECK_DEVICE(d, handle)                    \
    CHECK_INIT();                                  \
    const struct nvmlDevice_st *d = lookup(handle); \
    if (d == NULL) {                               \
        return NVML_ERROR_INVALID_ARGUMENT;        \
    }

/* ---- init and shutdown ---- */

static void initDelay(void)
{
    long long ns = fakehost_init_delay_ns;
    if (ns <= 0) {
        return;
    }
    struct timespec req = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
    struct timespec rem;
    while (nanosleep(&req, &rem) != 0 && errno == EINTR) {
        req = rem;
    }
}

struct loadedNames {
    char *names[64];
    int n;
};

static int collectNVML(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct loadedNames *loaded = data;
    if (info->dlpi_name != NULL && strstr(info->dlpi_name, "libnvidia-ml.so") != NULL &&
        loaded->n < (int)(sizeof(loaded->names) / sizeof(loaded->names[0]))) {
        loaded->names[loaded->n] = strdup(info->dlpi_name);
        if (loaded->names[loaded->n] != NULL) {
            loaded->n++;
        }
    }
    return 0;
}

/* otherHostLoaded reports whether a fake NVML with another host's data is loaded too. */
static int otherHostLoaded(void)
{
    struct loadedNames loaded = {.n = 0};
    int conflict = 0;
    dl_iterate_phdr(collectNVML, &loaded);
    for (int i = 0; i < loaded.n; i++) {
        void *handle = dlopen(loaded.names[i], RTLD_LAZY | RTLD_NOLOAD);
        if (handle != NULL) {
            const char *id = dlsym(handle, "fakehost_nvml_config_id");
            if (id != NULL && strcmp(id, fakehost_nvml_config_id) != 0) {
                fprintf(stderr,
                        "fakehost: fake NVML libraries of different fake hosts are loaded in this process "
                        "(%s and another); calls reach only the first one loaded, so each fake host's NVML "
                        "must be used from its own process\n",
                        loaded.names[i]);
                conflict = 1;
            }
            dlclose(handle);
        }
        free(loaded.names[i]);
    }
    return conflict;
}

static nvmlReturn_t doInit(void)
{
    initDelay();
    if (otherHostLoaded()) {
        return NVML_ERROR_UNKNOWN;
    }
    if (fakehost_init_error) {
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    pthread_mutex_lock(&lock);
    refcount++;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlInit_v2(void) { return doInit(); }
API nvmlReturn_t nvmlInit(void) { return doInit(); }
API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return doInit();
}

API nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (refcount == 0) {
        ret = NVML_ERROR_UNINITIALIZED;
    } else {
        refcount--;
    }
    pthread_mutex_unlock(&lock);
    return ret;
}

API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

/* ---- system queries ---- */

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    CHECK_INIT();
    return copyString(version, length, fakehost_driver_version);
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    CHECK_INIT();
    return copyString(version, length, fakehost_nvml_version);
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    CHECK_INIT();
    if (cudaDriverVersion == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *cudaDriverVersion = fakehost_cuda_version;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---- device enumeration ---- */

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    CHECK_INIT();
    if (deviceCount == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *deviceCount = fakehost_gpu_count;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (device == NULL || index >= fakehost_gpu_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    device->handle = &fakehost_devices[index];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (uuid == NULL || device == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < fakehost_gpu_count; i++) {
        if (strcmp(fakehost_devices[i].uuid, uuid) == 0) {
            device->handle = &fakehost_devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* Accepts "domain:bus:device.function" with a 4- or 8-digit domain, any case, as NVML does. */
API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (pciBusId == NULL || device == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned int domain, bus, dev, fn;
    char extra;
    if (sscanf(pciBusId, "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &extra) != 4) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < fakehost_gpu_count; i++) {
        const struct nvmlDevice_st *d = &fakehost_devices[i];
        if (d->domain == domain && d->bus == bus && d->device == dev && d->function == fn) {
            device->handle = &fakehost_devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ---- device queries ---- */

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    CHECK_DEVICE(d, device);
    if (index == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *index = d->index;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    CHECK_DEVICE(d, device);
    return copyString(uuid, length, d->uuid);
}

API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    CHECK_DEVICE(d, device);
    if (minorNumber == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *minorNumber = d->minor;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    CHECK_DEVICE(d, device);
    return copyString(name, length, d->name);
}

API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    CHECK_DEVICE(d, device);
    if (type == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *type = d->brand;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    CHECK_DEVICE(d, device);
    if (major == NULL || minor == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *major = d->ccMajor;
    *minor = d->ccMinor;
    return NVML_SUCCESS;
}

/* Architecture derived from the compute capability, as the real driver reports it. */
API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    CHECK_DEVICE(d, device);
    if (arch == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    switch (d->ccMajor) {
    case 3: *arch = 2; break;                        /* Kepler */
    case 5: *arch = 3; break;                        /* Maxwell */
    case 6: *arch = 4; break;                        /* Pascal */
    case 7: *arch = d->ccMinor >= 5 ? 6 : 5; break;  /* Turing : Volta */
    case 8: *arch = d->ccMinor >= 9 ? 8 : 7; break;  /* Ada : Ampere */
    case 9: *arch = 9; break;                        /* Hopper */
    case 10: case 12: *arch = 10; break;             /* Blackwell */
    default: *arch = 0xffffffff; break;              /* NVML_DEVICE_ARCH_UNKNOWN */
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t fillPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci, int full)
{
    CHECK_DEVICE(d, device);
    if (pci == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%s", d->busIdLegacy);
    pci->domain = d->domain;
    pci->bus = d->bus;
    pci->device = d->device;
    pci->pciDeviceId = d->pciDeviceId;
    pci->pciSubSystemId = d->pciSubSystemId;
    if (full) {
        snprintf(pci->busId, sizeof(pci->busId), "%s", d->busId);
    }
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return fillPciInfo(device, pci, 1);
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return fillPciInfo(device, pci, 1);
}

/* The v1 struct ends after pciSubSystemId plus reserved words, so leave busId alone. */
API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return fillPciInfo(device, pci, 0);
}

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    CHECK_DEVICE(d, device);
    (void)d;
    (void)currentMode;
    (void)pendingMode;
    return NVML_ERROR_NOT_SUPPORTED;
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    CHECK_DEVICE(d, device);
    (void)d;
    if (isMigDevice == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *isMigDevice = 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    CHECK_DEVICE(d, device);
    (void)d;
    if (mode == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *mode = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}
