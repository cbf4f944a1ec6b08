/*
 * fakenvml.c - a fake libnvidia-ml.so for gpu-runtime's tests.
 *
 * internal/fakehost compiles this file once per process and links it, per fake host, with a
 * generated fakenvml_config.c that defines the data declared in fakenvml.h (driver and CUDA
 * versions, the GPUs and their MIG devices, whether and how nvmlInit fails, the events file),
 * so each host's data is baked into its library.
 *
 * The NVML types below are declared with the same layout as NVIDIA's nvml.h (as shipped with
 * github.com/NVIDIA/go-nvml v0.13.3-1); only the few this library needs are declared. The
 * return codes follow that header's documentation of each function. Device handles are
 * pointers into the static fakehost_devices array (GPUs) or fakehost_mig_devices array (MIG
 * devices); GPU and compute instance handles point into their own arrays.
 *
 * Which symbol go-nvml v0.13.3-1 calls: it binds nvmlInit_v2, nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetPciInfo_v3,
 * nvmlEventSetWait_v2, nvmlDeviceGetAttributes_v2 and nvmlComputeInstanceGetInfo_v2 when the
 * library has them (pkg/nvml/lib.go, updateVersionedSymbols) and the plain names otherwise;
 * Device.GetMemoryInfo calls nvmlDeviceGetMemoryInfo (nvmlMemory_t) and GetMemoryInfo_v2
 * nvmlDeviceGetMemoryInfo_v2 (nvmlMemory_v2_t, version checked). Both names exist here.
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
#include <sys/stat.h>
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
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
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
#define NVML_DEVICE_UUID_BUFFER_SIZE 80

typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlExcludedDeviceInfo_st {
    nvmlPciInfo_t pciInfo;
    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
} nvmlExcludedDeviceInfo_t;

/* A device handle: a GPU's (struct nvmlDevice_st) or a MIG device's (struct fakehostMigDevice). */
typedef struct {
    void *handle;
} nvmlDevice_t;

typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

/* NVML_STRUCT_VERSION(Memory, 2) */
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2U << 24U)))

typedef struct nvmlDeviceAttributes_st {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct nvmlGpuInstancePlacement_st {
    unsigned int start;
    unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceProfileInfo_st {
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct nvmlGpuInstanceInfo_st {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
    unsigned int start;
    unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct nvmlComputeInstanceInfo_st {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
    nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* The nvmlComputeInstanceInfo_t of the first MIG drivers, before placement was added. */
typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
} nvmlComputeInstanceInfo_v1_t;

typedef struct nvmlEventData_st {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

/* The nvmlEventData_t of nvmlEventSetWait (v1), before the instance ids were added. */
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
} nvmlEventData_v1_t;

#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1

#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0

#define nvmlEventTypeSingleBitEccError 0x0000000000000001ULL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002ULL
#define nvmlEventTypePState 0x0000000000000004ULL
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL
#define nvmlEventTypeClock 0x0000000000000010ULL
#define nvmlEventTypePowerSourceChange 0x0000000000000080ULL
#define nvmlEventMigConfigChange 0x0000000000000100ULL
#define nvmlEventTypeAll 0x000000000000ff9fULL /* nvml.h's nvmlEventTypeAll */

/* The instance ids of an event that concerns the whole GPU. */
#define NO_INSTANCE 0xFFFFFFFFU

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int refcount;

static int initialized(void)
{
    pthread_mutex_lock(&lock);
    int ok = refcount > 0;
    pthread_mutex_unlock(&lock);
    return ok;
}

/* inArray reports whether p points at one of the count elements of size bytes from first. */
static int inArray(const void *p, const void *first, unsigned int count, size_t size)
{
    uintptr_t u = (uintptr_t)p, f = (uintptr_t)first;
    return u >= f && u < f + (uintptr_t)count * size && (u - f) % size == 0;
}

/* lookup returns the GPU behind a handle, or NULL for anything else. */
static struct nvmlDevice_st *lookup(nvmlDevice_t device)
{
    if (!inArray(device.handle, fakehost_devices, fakehost_gpu_count, sizeof(fakehost_devices[0]))) {
        return NULL;
    }
    return device.handle;
}

/* lookupMig returns the MIG device behind a handle, or NULL for anything else. */
static struct fakehostMigDevice *lookupMig(nvmlDevice_t device)
{
    if (!inArray(device.handle, fakehost_mig_devices, fakehost_mig_count, sizeof(fakehost_mig_devices[0]))) {
        return NULL;
    }
    return device.handle;
}

static nvmlDevice_t gpuHandle(unsigned int index)
{
    return (nvmlDevice_t){&fakehost_devices[index]};
}

static struct nvmlGpuInstance_st *lookupGpuInstance(nvmlGpuInstance_t gi)
{
    return inArray(gi, fakehost_gpu_instances, fakehost_gi_count, sizeof(fakehost_gpu_instances[0])) ? gi : NULL;
}

static struct nvmlComputeInstance_st *lookupComputeInstance(nvmlComputeInstance_t ci)
{
    return inArray(ci, fakehost_compute_instances, fakehost_mig_count, sizeof(fakehost_compute_instances[0])) ? ci : NULL;
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

/*
 * CHECK_GPU declares d, the GPU behind handle, for queries of whole GPUs. A MIG device handle
 * gets NVML_ERROR_NOT_SUPPORTED ("if this query is not supported by the device"), anything
 * else NVML_ERROR_INVALID_ARGUMENT.
 */
#define CHECK_GPU(d, handle)                              \
    CHECK_INIT();                                         \
    struct nvmlDevice_st *d = lookup(handle);             \
    if (d == NULL) {                                      \
        return lookupMig(handle) != NULL ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT; \
    }

/* CHECK_ANY declares d (a GPU) or m (a MIG device), one of them non-NULL, for handle. */
#define CHECK_ANY(d, m, handle)                           \
    CHECK_INIT();                                         \
    struct nvmlDevice_st *d = lookup(handle);             \
    struct fakehostMigDevice *m = lookupMig(handle);      \
    if (d == NULL && m == NULL) {                         \
        return NVML_ERROR_INVALID_ARGUMENT;               \
    }

/* ---- init and shutdown ---- */

static void sleepNs(long long ns)
{
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

/*
 * The kernel module. On a real host the driver is loaded while /proc/driver/nvidia exists;
 * nvmlInit then fails with NVML_ERROR_DRIVER_NOT_LOADED ("NVIDIA driver is not running").
 * This library plays the driver of the fake host it lies in: loaded while the host's
 * procroot/proc/driver/nvidia/version exists (Host.UnloadDriver moves it aside), found by
 * looking for procroot/proc next to each directory above the library. A library that lies in
 * no fake host (bind-mounted into a container, say) has its driver always loaded.
 */
static char procVersionPath[4096 + 64];

static void findProcRoot(void)
{
    Dl_info info;
    char dir[4096], real[4096], probe[4096 + 32];
    if (dladdr((void *)findProcRoot, &info) == 0 || info.dli_fname == NULL) {
        return;
    }
    const char *slash = strrchr(info.dli_fname, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash != NULL ? (int)(slash - info.dli_fname) : 1,
             slash != NULL ? info.dli_fname : ".");
    if (realpath(dir, real) == NULL) {
        return;
    }
    for (int up = 0; up < 6; up++) {
        char *last = strrchr(real, '/');
        if (last == NULL || last == real) {
            break;
        }
        *last = '\0';
        struct stat st;
        snprintf(probe, sizeof(probe), "%s/procroot/proc", real);
        if (stat(probe, &st) == 0 && S_ISDIR(st.st_mode)) {
            snprintf(procVersionPath, sizeof(procVersionPath), "%s/procroot/proc/driver/nvidia/version", real);
            return;
        }
    }
}

static int driverLoaded(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, findProcRoot);
    struct stat st;
    return procVersionPath[0] == '\0' || stat(procVersionPath, &st) == 0;
}

static nvmlReturn_t doInit(void)
{
    sleepNs(fakehost_init_delay_ns);
    if (otherHostLoaded()) {
        return NVML_ERROR_UNKNOWN;
    }
    if (fakehost_init_error || !driverLoaded()) {
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
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
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
    *device = gpuHandle(index);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* A GPU's UUID gives the GPU, a MIG device's its MIG device handle ("The UUID of the target GPU
 * or MIG instance"). */
API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (uuid == NULL || device == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < fakehost_gpu_count; i++) {
        if (strcmp(fakehost_devices[i].uuid, uuid) == 0) {
            *device = gpuHandle(i);
            return NVML_SUCCESS;
        }
    }
    for (unsigned int i = 0; i < fakehost_mig_count; i++) {
        if (strcmp(fakehost_mig_devices[i].uuid, uuid) == 0) {
            device->handle = &fakehost_mig_devices[i];
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
            *device = gpuHandle(i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* GPUs the driver excluded (NVreg_ExcludedGpus) are not enumerated above but counted here. */
API nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount)
{
    CHECK_INIT();
    if (deviceCount == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *deviceCount = fakehost_excluded_count;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGetExcludedDeviceInfoByIndex(unsigned int index, nvmlExcludedDeviceInfo_t *info)
{
    CHECK_INIT();
    if (info == NULL || index >= fakehost_excluded_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    const struct fakehostExcluded *e = &fakehost_excluded[index];
    memset(info, 0, sizeof(*info));
    snprintf(info->pciInfo.busIdLegacy, sizeof(info->pciInfo.busIdLegacy), "%s", e->busIdLegacy);
    snprintf(info->pciInfo.busId, sizeof(info->pciInfo.busId), "%s", e->busId);
    info->pciInfo.domain = e->domain;
    info->pciInfo.bus = e->bus;
    info->pciInfo.device = e->device;
    info->pciInfo.pciDeviceId = e->pciDeviceId;
    info->pciInfo.pciSubSystemId = e->pciSubSystemId;
    snprintf(info->uuid, sizeof(info->uuid), "%s", e->uuid);
    return NVML_SUCCESS;
}

/* ---- device queries ---- */

/* On a MIG device handle, the index that nvmlDeviceGetMigDeviceHandleByIndex takes. */
API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    CHECK_ANY(d, m, device);
    if (index == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *index = d != NULL ? d->index : m->index;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    CHECK_ANY(d, m, device);
    return copyString(uuid, length, d != NULL ? d->uuid : m->uuid);
}

API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    CHECK_GPU(d, device);
    if (minorNumber == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *minorNumber = d->minor;
    return NVML_SUCCESS;
}

/* A MIG device's name is its parent's with the profile: "NVIDIA A100-SXM4-80GB MIG 3g.40gb". */
API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    CHECK_ANY(d, m, device);
    return copyString(name, length, d != NULL ? d->name : m->name);
}

API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    CHECK_GPU(d, device);
    if (type == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *type = d->brand;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    CHECK_GPU(d, device);
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
    CHECK_GPU(d, device);
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
    CHECK_GPU(d, device);
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

API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    CHECK_GPU(d, device);
    if (mode == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *mode = d->persistence;
    return NVML_SUCCESS;
}

/* Memory of a GPU or, on a MIG device handle, of the MIG device. Nothing runs on a fake GPU,
 * so nothing is used or reserved. */
static nvmlReturn_t memoryOf(nvmlDevice_t device, unsigned long long *total)
{
    CHECK_ANY(d, m, device);
    *total = (d != NULL ? d->memoryMiB : m->memoryMiB) << 20;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    unsigned long long total = 0;
    nvmlReturn_t ret = memoryOf(device, &total);
    if (ret != NVML_SUCCESS) {
        return ret;
    }
    if (memory == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    memory->total = total;
    memory->used = 0;
    memory->free = total;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    unsigned long long total = 0;
    nvmlReturn_t ret = memoryOf(device, &total);
    if (ret != NVML_SUCCESS) {
        return ret;
    }
    if (memory == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (memory->version != nvmlMemory_v2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    memory->total = total;
    memory->reserved = 0;
    memory->used = 0;
    memory->free = total;
    return NVML_SUCCESS;
}

/* ---- MIG ---- */

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    CHECK_GPU(d, device);
    if (!d->migCapable) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (currentMode == NULL || pendingMode == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *currentMode = d->migCurrent ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = d->migPending ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    CHECK_ANY(d, m, device);
    (void)d;
    if (isMigDevice == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *isMigDevice = m != NULL;
    return NVML_SUCCESS;
}

/* "Returns zero if MIG is not supported or enabled." */
API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    CHECK_GPU(d, device);
    if (count == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *count = d->maxMigDevices;
    return NVML_SUCCESS;
}

/*
 * NOT_FOUND for an index below nvmlDeviceGetMaxMigDeviceCount with no MIG device; an index at
 * or past that count (every index when MIG mode is disabled, the count being 0) is invalid,
 * and a GPU without MIG does not support the query.
 */
API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
    CHECK_INIT();
    struct nvmlDevice_st *d = lookup(device);
    if (d == NULL || migDevice == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!d->migCapable) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (index >= d->maxMigDevices) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (index >= d->migCount) {
        return NVML_ERROR_NOT_FOUND;
    }
    migDevice->handle = &fakehost_mig_devices[d->migFirst + index];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    CHECK_INIT();
    struct fakehostMigDevice *m = lookupMig(migDevice);
    if (m == NULL || device == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *device = gpuHandle(m->parent);
    return NVML_SUCCESS;
}

/* GPU and compute instance ids "for the given MIG device handle"; a GPU handle has none. */
API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    CHECK_ANY(d, m, device);
    if (d != NULL) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (id == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *id = fakehost_gpu_instances[m->gpuInstance].id;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    CHECK_ANY(d, m, device);
    if (d != NULL) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (id == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *id = m->ciId;
    return NVML_SUCCESS;
}

/* "This API currently only supports MIG device handles." */
API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    CHECK_ANY(d, m, device);
    if (d != NULL) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (attributes == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    const struct nvmlGpuInstance_st *gi = &fakehost_gpu_instances[m->gpuInstance];
    const struct fakehostGIProfile *p = &fakehost_gi_profiles[gi->profile];
    attributes->multiprocessorCount = m->sm;
    attributes->sharedCopyEngineCount = p->ce;
    attributes->sharedDecoderCount = p->dec;
    attributes->sharedEncoderCount = p->enc;
    attributes->sharedJpegCount = p->jpeg;
    attributes->sharedOfaCount = p->ofa;
    attributes->gpuInstanceSliceCount = p->slices;
    attributes->computeInstanceSliceCount = m->ciSlices;
    attributes->memorySizeMB = m->memoryMiB;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return nvmlDeviceGetAttributes_v2(device, attributes);
}

/* Profile queries work on a MIG-capable GPU whatever its mode; profile indexes are the
 * NVML_GPU_INSTANCE_PROFILE_* constants, those the GPU lacks are NOT_SUPPORTED. */
API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info)
{
    CHECK_INIT();
    struct nvmlDevice_st *d = lookup(device);
    if (d == NULL || info == NULL || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!d->migCapable) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    for (unsigned int i = d->profileFirst; i < d->profileFirst + d->profileCount; i++) {
        const struct fakehostGIProfile *p = &fakehost_gi_profiles[i];
        if (p->index != profile) {
            continue;
        }
        memset(info, 0, sizeof(*info));
        info->id = p->id;
        info->isP2pSupported = 0;
        info->sliceCount = p->slices;
        info->instanceCount = p->instances;
        info->multiprocessorCount = p->sm;
        info->copyEngineCount = p->ce;
        info->decoderCount = p->dec;
        info->encoderCount = p->enc;
        info->jpegCount = p->jpeg;
        info->ofaCount = p->ofa;
        info->memorySizeMB = p->memoryMiB;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

/* "NOT_SUPPORTED If device doesn't have MIG mode enabled", NOT_FOUND for an unknown id. */
API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance)
{
    CHECK_INIT();
    struct nvmlDevice_st *d = lookup(device);
    if (d == NULL || gpuInstance == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!d->migCapable || !d->migCurrent) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    for (unsigned int i = d->giFirst; i < d->giFirst + d->giCount; i++) {
        if (fakehost_gpu_instances[i].id == id) {
            *gpuInstance = &fakehost_gpu_instances[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    CHECK_INIT();
    struct nvmlGpuInstance_st *gi = lookupGpuInstance(gpuInstance);
    if (gi == NULL || info == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    memset(info, 0, sizeof(*info));
    info->device = gpuHandle(gi->parent);
    info->id = gi->id;
    info->profileId = fakehost_gi_profiles[gi->profile].id;
    info->placement.start = gi->start;
    info->placement.size = gi->size;
    return NVML_SUCCESS;
}

/* Compute instance profile indexes are the NVML_COMPUTE_INSTANCE_PROFILE_* constants, which
 * are also the profile ids; this maps them to compute slices (0 for none of A100/H100's). */
static unsigned int ciProfileSlices(unsigned int profile)
{
    static const unsigned int slices[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = {1, 2, 3, 4, 7, 8, 6, 0, 0};
    return profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT ? slices[profile] : 0;
}

/* Whether a c-slice compute instance fits a g-slice GPU instance (see mig.go, ciSlicesValid). */
static int ciSlicesValid(unsigned int c, unsigned int g)
{
    return c == g || (c >= 1 && c < g && c * 2 <= g + 1);
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                               unsigned int engProfile, nvmlComputeInstanceProfileInfo_t *info)
{
    CHECK_INIT();
    struct nvmlGpuInstance_st *gi = lookupGpuInstance(gpuInstance);
    if (gi == NULL || info == NULL || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
        engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    const struct fakehostGIProfile *p = &fakehost_gi_profiles[gi->profile];
    unsigned int c = ciProfileSlices(profile);
    if (c == 0 || !ciSlicesValid(c, p->slices)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    memset(info, 0, sizeof(*info));
    info->id = profile;
    info->sliceCount = c;
    info->instanceCount = p->slices / c;
    info->multiprocessorCount = p->sm * c / p->slices;
    info->sharedCopyEngineCount = p->ce;
    info->sharedDecoderCount = p->dec;
    info->sharedEncoderCount = p->enc;
    info->sharedJpegCount = p->jpeg;
    info->sharedOfaCount = p->ofa;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                       nvmlComputeInstance_t *computeInstance)
{
    CHECK_INIT();
    struct nvmlGpuInstance_st *gi = lookupGpuInstance(gpuInstance);
    if (gi == NULL || computeInstance == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned int giIndex = (unsigned int)(gi - fakehost_gpu_instances);
    for (unsigned int i = 0; i < fakehost_mig_count; i++) {
        if (fakehost_mig_devices[i].gpuInstance == giIndex && fakehost_mig_devices[i].ciId == id) {
            *computeInstance = &fakehost_compute_instances[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    CHECK_INIT();
    struct nvmlComputeInstance_st *ci = lookupComputeInstance(computeInstance);
    if (ci == NULL || info == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    const struct fakehostMigDevice *m = &fakehost_mig_devices[ci->mig];
    memset(info, 0, sizeof(*info));
    info->device = gpuHandle(m->parent);
    info->gpuInstance = &fakehost_gpu_instances[m->gpuInstance];
    info->id = m->ciId;
    info->profileId = 0;
    for (unsigned int p = 0; p < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; p++) {
        if (ciProfileSlices(p) == m->ciSlices) {
            info->profileId = p;
            break;
        }
    }
    info->placement.start = m->ciStart;
    info->placement.size = m->ciSlices;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_v1_t *info)
{
    nvmlComputeInstanceInfo_t v2;
    if (info == NULL) {
        return initialized() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    }
    nvmlReturn_t ret = nvmlComputeInstanceGetInfo_v2(computeInstance, &v2);
    if (ret == NVML_SUCCESS) {
        memcpy(info, &v2, sizeof(*info));
    }
    return ret;
}

/* ---- events ---- */

#define MAX_REGISTRATIONS 256

/* An event set reads the events file from offset on; each registration holds from since on. */
struct nvmlEventSet_st {
    struct nvmlEventSet_st *next; /* live sets */
    long offset;                  /* -1 until the first registration */
    unsigned int nregs;
    int lost; /* the driver went away under it: every later wait fails */
    struct {
        const struct nvmlDevice_st *gpu;
        unsigned long long types;
        long since;
    } regs[MAX_REGISTRATIONS];
};

static pthread_mutex_t eventsLock = PTHREAD_MUTEX_INITIALIZER;
static struct nvmlEventSet_st *liveSets;
static long reportedUpTo; /* malformed lines before this offset were reported already */

/* liveSet returns set if it was created and not freed yet; eventsLock held. */
static struct nvmlEventSet_st *liveSet(nvmlEventSet_t set)
{
    for (struct nvmlEventSet_st *s = liveSets; s != NULL; s = s->next) {
        if (s == set) {
            return s;
        }
    }
    return NULL;
}

/* The events a GPU supports: ECC, P-state, Xid and clock events, as data center GPUs have,
 * and MIG configuration changes on a MIG-capable one. */
static unsigned long long supportedEvents(const struct nvmlDevice_st *d)
{
    unsigned long long types = nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError |
                               nvmlEventTypePState | nvmlEventTypeXidCriticalError | nvmlEventTypeClock;
    if (d->migCapable) {
        types |= nvmlEventMigConfigChange;
    }
    return types;
}

static char defaultEventsPath[4096 + 16];

/* findEventsPath sets defaultEventsPath to <Dir>/nvml-events, four directories above this
 * library in <Dir>/driver/usr/lib/x86_64-linux-gnu (the events file of the default options;
 * see events.go). Elsewhere, say bind-mounted into a container, that names a file that does
 * not exist, so no events arrive. */
static void findEventsPath(void)
{
    Dl_info info;
    char dir[4096], real[4096];
    if (dladdr((void *)findEventsPath, &info) == 0 || info.dli_fname == NULL) {
        return;
    }
    const char *slash = strrchr(info.dli_fname, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash != NULL ? (int)(slash - info.dli_fname) : 1,
             slash != NULL ? info.dli_fname : ".");
    if (realpath(dir, real) == NULL) {
        return;
    }
    for (int up = 0; up < 4; up++) {
        char *last = strrchr(real, '/');
        if (last == NULL) {
            break;
        }
        *last = '\0';
    }
    snprintf(defaultEventsPath, sizeof(defaultEventsPath), "%s/nvml-events", real);
}

static const char *eventsPath(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (fakehost_events_path[0] != '\0') {
        return fakehost_events_path;
    }
    pthread_once(&once, findEventsPath);
    return defaultEventsPath;
}

static long eventsFileSize(void)
{
    struct stat st;
    if (stat(eventsPath(), &st) != 0) {
        return 0;
    }
    return (long)st.st_size;
}

API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    CHECK_INIT();
    if (set == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    struct nvmlEventSet_st *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NVML_ERROR_MEMORY;
    }
    s->offset = -1;
    pthread_mutex_lock(&eventsLock);
    s->next = liveSets;
    liveSets = s;
    pthread_mutex_unlock(&eventsLock);
    *set = s;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    CHECK_INIT();
    pthread_mutex_lock(&eventsLock);
    for (struct nvmlEventSet_st **p = &liveSets; *p != NULL; p = &(*p)->next) {
        if (*p == set) {
            *p = set->next;
            pthread_mutex_unlock(&eventsLock);
            free(set);
            return NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&eventsLock);
    return NVML_ERROR_INVALID_ARGUMENT;
}

API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    CHECK_GPU(d, device);
    if (eventTypes == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *eventTypes = supportedEvents(d);
    return NVML_SUCCESS;
}

/*
 * Events are recorded from the call on ("All events that occurred before this call are not
 * recorded"). Unknown bits are invalid; bits the GPU does not support make the call fail
 * with NOT_SUPPORTED and register nothing. MIG device handles do not take registrations:
 * "This API does not currently support per-instance event reporting using MIG device
 * handles"; MIG events come on the parent with the instance ids.
 */
API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    CHECK_GPU(d, device);
    if ((eventTypes & ~nvmlEventTypeAll) != 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if ((eventTypes & ~supportedEvents(d)) != 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    pthread_mutex_lock(&eventsLock);
    struct nvmlEventSet_st *s = liveSet(set);
    nvmlReturn_t ret = NVML_SUCCESS;
    if (s == NULL) {
        ret = NVML_ERROR_INVALID_ARGUMENT;
    } else if (s->nregs == MAX_REGISTRATIONS) {
        ret = NVML_ERROR_MEMORY;
    } else {
        long now = eventsFileSize();
        s->regs[s->nregs].gpu = d;
        s->regs[s->nregs].types = eventTypes;
        s->regs[s->nregs].since = now;
        s->nregs++;
        if (s->offset < 0) {
            s->offset = now;
        }
    }
    pthread_mutex_unlock(&eventsLock);
    return ret;
}

/* parseEvent parses one line of the events file (see events.go) into data. It returns 1 for an
 * event, 0 for a line to skip silently, -1 (with why set) for a malformed line. */
static int parseEvent(char *line, nvmlEventData_t *data, const char **why)
{
    char *save = NULL, *tok[8];
    int n = 0;
    for (char *t = strtok_r(line, " \t\r", &save); t != NULL; t = strtok_r(NULL, " \t\r", &save)) {
        if (n == 8) {
            *why = "too many fields";
            return -1;
        }
        tok[n++] = t;
    }
    if (n == 0 || tok[0][0] == '#') {
        return 0;
    }
    if (n < 2) {
        *why = "no event type";
        return -1;
    }
    int first = 2; /* first field after the type and its data */
    if (strcmp(tok[1], "xid") == 0) {
        char *end;
        if (n < 3 || tok[2][0] == '-' || (data->eventData = strtoull(tok[2], &end, 10), *end != '\0')) {
            *why = "an xid event needs the Xid number";
            return -1;
        }
        data->eventType = nvmlEventTypeXidCriticalError;
        first = 3;
    } else if (strcmp(tok[1], "sbe") == 0) {
        data->eventType = nvmlEventTypeSingleBitEccError;
        data->eventData = 0;
    } else if (strcmp(tok[1], "dbe") == 0) {
        data->eventType = nvmlEventTypeDoubleBitEccError;
        data->eventData = 0;
    } else {
        *why = "the event type is not xid, sbe or dbe";
        return -1;
    }
    data->gpuInstanceId = NO_INSTANCE;
    data->computeInstanceId = NO_INSTANCE;
    const struct fakehostMigDevice *mig = NULL;
    data->device.handle = NULL;
    for (unsigned int i = 0; i < fakehost_gpu_count; i++) {
        if (strcmp(fakehost_devices[i].uuid, tok[0]) == 0) {
            data->device = gpuHandle(i);
        }
    }
    for (unsigned int i = 0; i < fakehost_mig_count; i++) {
        if (strcmp(fakehost_mig_devices[i].uuid, tok[0]) == 0) {
            mig = &fakehost_mig_devices[i];
            data->device = gpuHandle(mig->parent);
            data->gpuInstanceId = fakehost_gpu_instances[mig->gpuInstance].id;
            data->computeInstanceId = mig->ciId;
        }
    }
    if (data->device.handle == NULL) {
        *why = "no GPU or MIG device of this host has this UUID";
        return -1;
    }
    if (n == first + 2 && mig == NULL) {
        char *end1, *end2;
        unsigned long gi = strtoul(tok[first], &end1, 10), ci = strtoul(tok[first + 1], &end2, 10);
        if (*end1 != '\0' || *end2 != '\0' || tok[first][0] == '-' || tok[first + 1][0] == '-' ||
            gi > 0xFFFFFFFFUL || ci > 0xFFFFFFFFUL) {
            *why = "the instance ids are not numbers";
            return -1;
        }
        data->gpuInstanceId = (unsigned int)gi;
        data->computeInstanceId = (unsigned int)ci;
    } else if (n != first) {
        *why = mig != NULL ? "a MIG device's event takes no instance ids" : "expected the two instance ids or nothing after the event";
        return -1;
    }
    return 1;
}

/* nextEvent returns 1 and fills data with the set's next event, or returns 0 when there is
 * none yet. eventsLock held. */
static int nextEvent(struct nvmlEventSet_st *s, nvmlEventData_t *data)
{
    if (s->offset < 0) {
        return 0;
    }
    FILE *f = fopen(eventsPath(), "r");
    if (f == NULL) {
        return 0;
    }
    int found = 0;
    char *line = NULL;
    size_t cap = 0;
    if (fseek(f, s->offset, SEEK_SET) == 0) {
        ssize_t len;
        while (!found && (len = getline(&line, &cap, f)) > 0) {
            if (line[len - 1] != '\n') {
                break; /* still being written */
            }
            long at = s->offset;
            s->offset += len;
            line[len - 1] = '\0';
            const char *why = NULL;
            int ok = parseEvent(line, data, &why);
            if (ok < 0) {
                if (at >= reportedUpTo) { /* once, not once per event set */
                    fprintf(stderr, "fakehost: NVML events file %s: line at byte %ld skipped: %s\n", eventsPath(), at, why);
                    reportedUpTo = s->offset;
                }
                continue;
            }
            for (unsigned int i = 0; ok > 0 && i < s->nregs; i++) {
                if (s->regs[i].gpu == data->device.handle && (s->regs[i].types & data->eventType) != 0 &&
                    s->regs[i].since <= at) {
                    found = 1;
                    break;
                }
            }
        }
    }
    free(line);
    fclose(f);
    return found;
}

static long long nowNs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/*
 * Waits up to timeoutms for the set's next event: NVML_ERROR_TIMEOUT if none arrives. When the
 * driver goes away under it (Host.UnloadDriver: the real driver cannot be unloaded while NVML
 * holds it, but a GPU reset or a replaced driver container ends the same way) it fails with
 * NVML_ERROR_GPU_IS_LOST, what NVML documents for a GPU that "has fallen off the bus or is
 * otherwise inaccessible"; so do later waits, until the client initialises NVML again.
 */
API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    CHECK_INIT();
    if (data == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    long long deadline = nowNs() + (long long)timeoutms * 1000000LL;
    for (;;) {
        int loaded = driverLoaded();
        pthread_mutex_lock(&eventsLock);
        struct nvmlEventSet_st *s = liveSet(set);
        if (s != NULL && !loaded) {
            s->lost = 1; /* the set does not come back with the driver */
        }
        int lost = s != NULL && s->lost;
        nvmlEventData_t event;
        int found = s != NULL && !lost && nextEvent(s, &event);
        pthread_mutex_unlock(&eventsLock);
        if (s == NULL) {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        if (lost) {
            return NVML_ERROR_GPU_IS_LOST;
        }
        if (found) {
            *data = event;
            return NVML_SUCCESS;
        }
        long long left = deadline - nowNs();
        if (left <= 0) {
            return NVML_ERROR_TIMEOUT;
        }
        sleepNs(left < 5000000LL ? left : 5000000LL);
    }
}

/* The first nvmlEventSetWait filled a struct without the instance ids. */
API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_v1_t *data, unsigned int timeoutms)
{
    nvmlEventData_t v2;
    if (data == NULL) {
        return initialized() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    }
    nvmlReturn_t ret = nvmlEventSetWait_v2(set, &v2, timeoutms);
    if (ret == NVML_SUCCESS) {
        memcpy(data, &v2, sizeof(*data));
    }
    return ret;
}

/* ---- per-cgroup memory limits (driver R615 / CUDA 13.4) ----
 *
 * Built only into a fake NVML whose host offers them (-DFAKEHOST_MEMORY_LIMITS; without it the
 * symbols are absent, as in an older driver). fakehost_memory_limits 2 makes them answer
 * NVML_ERROR_NOT_SUPPORTED. Limits live in fakehost_memory_limits_path, one line per device and
 * cgroup: "<uuid>\t<st_dev>\t<st_ino>\t<ctime ns>\t<soft>\t<hard>\t<cgroup path>\n", so that every process
 * using this library, and the tests, see them. An entry counts only while the cgroup directory
 * is the one it was set on (same device, inode and change time): "removing the cgroup will also clear any
 * limits" (nvml.h). The semantics follow nvml.h of go-nvml v0.13.4-1.
 */
#ifdef FAKEHOST_MEMORY_LIMITS
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#define NVML_DEVICE_MEMORY_LIMIT_MAX 0xFFFFFFFFFFFFFFFFULL
#define MEMLIMITS_MAX_LINES 4096

typedef struct {
    const char *nameSpace;
    unsigned long long softLimit;
    unsigned long long hardLimit;
} nvmlSetMemoryLimits_v1_t;

typedef struct {
    const char *nameSpace;
    unsigned long long softLimit;
    unsigned long long hardLimit;
    unsigned long long currentUsed;
} nvmlGetMemoryLimits_v1_t;

/* memlimitsCheck validates device and cgroup path shared by Set and Get and stats the cgroup. */
static nvmlReturn_t memlimitsCheck(nvmlDevice_t device, const char *ns, struct nvmlDevice_st **out, struct stat *st)
{
    CHECK_INIT();
    struct nvmlDevice_st *d = lookup(device);
    if (d == NULL) {
        /* nvml.h: "MIG handles are not supported" */
        return lookupMig(device) != NULL ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    }
    if (fakehost_memory_limits == 2) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (ns == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int fd = open(ns, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return NVML_ERROR_OPERATING_SYSTEM; /* "if the cgroup path cannot be opened" */
    }
    int ok = fstat(fd, st) == 0;
    close(fd);
    if (!ok) {
        return NVML_ERROR_OPERATING_SYSTEM;
    }
    *out = d;
    return NVML_SUCCESS;
}

/* ctimeNs is when the cgroup directory was made, as far as stat tells: with its device and inode
 * (which a file system may reuse at once) it tells a cgroup from one made again at its path. */
static unsigned long long ctimeNs(const struct stat *st)
{
    return (unsigned long long)st->st_ctim.tv_sec * 1000000000ULL + (unsigned long long)st->st_ctim.tv_nsec;
}

/* memlimitsUpdate rewrites the limits file under an exclusive lock: the entry of (uuid, path) is
 * dropped, then added with soft and hard unless add is 0. Get passes found to read one. */
static nvmlReturn_t memlimitsAccess(const char *uuid, const struct stat *cg, const char *ns, int write,
                                    int add, unsigned long long *soft, unsigned long long *hard, int *found)
{
    char lockPath[4096 + 8], tmpPath[4096 + 8];
    snprintf(lockPath, sizeof(lockPath), "%s.lock", fakehost_memory_limits_path);
    snprintf(tmpPath, sizeof(tmpPath), "%s.tmp", fakehost_memory_limits_path);
    int lfd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lfd < 0 || flock(lfd, write ? LOCK_EX : LOCK_SH) != 0) {
        if (lfd >= 0) {
            close(lfd);
        }
        return NVML_ERROR_UNKNOWN;
    }
    nvmlReturn_t ret = NVML_SUCCESS;
    FILE *in = fopen(fakehost_memory_limits_path, "re");
    FILE *outf = NULL;
    if (write && (outf = fopen(tmpPath, "we")) == NULL) {
        ret = NVML_ERROR_UNKNOWN;
        goto done;
    }
    *found = 0;
    char line[8192];
    for (int n = 0; in != NULL && n < MEMLIMITS_MAX_LINES && fgets(line, sizeof(line), in) != NULL; n++) {
        char u[128], p[4096 + 1];
        unsigned long long dev, ino, ct, s, h;
        line[strcspn(line, "\n")] = '\0';
        if (sscanf(line, "%127[^\t]\t%llu\t%llu\t%llu\t%llu\t%llu\t%4096[^\n]", u, &dev, &ino, &ct, &s, &h, p) != 7) {
            continue;
        }
        int same = strcmp(u, uuid) == 0 && strcmp(p, ns) == 0;
        if (same && !write && dev == (unsigned long long)cg->st_dev && ino == (unsigned long long)cg->st_ino &&
            ct == ctimeNs(cg)) {
            *found = 1;
            *soft = s;
            *hard = h;
        }
        if (write && !same) {
            fprintf(outf, "%s\n", line);
        }
    }
    if (write) {
        if (add) {
            fprintf(outf, "%s\t%llu\t%llu\t%llu\t%llu\t%llu\t%s\n", uuid, (unsigned long long)cg->st_dev,
                    (unsigned long long)cg->st_ino, ctimeNs(cg), *soft, *hard, ns);
        }
        if (fclose(outf) != 0 || rename(tmpPath, fakehost_memory_limits_path) != 0) {
            ret = NVML_ERROR_UNKNOWN;
        }
    }
done:
    if (in != NULL) {
        fclose(in);
    }
    close(lfd);
    return ret;
}

API nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device, nvmlSetMemoryLimits_v1_t *limits)
{
    struct nvmlDevice_st *d = NULL;
    struct stat cg;
    nvmlReturn_t ret = memlimitsCheck(device, limits != NULL ? limits->nameSpace : NULL, &d, &cg);
    if (ret != NVML_SUCCESS) {
        return ret;
    }
    if (geteuid() != 0) {
        return NVML_ERROR_NO_PERMISSION; /* "Requires root/admin permissions." */
    }
    unsigned long long soft = limits->softLimit, hard = limits->hardLimit, total = d->memoryMiB << 20;
    int clear = soft == 0 && hard == NVML_DEVICE_MEMORY_LIMIT_MAX;
    if (soft > hard || soft > total || (hard != NVML_DEVICE_MEMORY_LIMIT_MAX && hard > total)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int found = 0;
    return memlimitsAccess(d->uuid, &cg, limits->nameSpace, 1, !clear, &soft, &hard, &found);
}

API nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device, nvmlGetMemoryLimits_v1_t *limits)
{
    struct nvmlDevice_st *d = NULL;
    struct stat cg;
    nvmlReturn_t ret = memlimitsCheck(device, limits != NULL ? limits->nameSpace : NULL, &d, &cg);
    if (ret != NVML_SUCCESS) {
        return ret;
    }
    unsigned long long soft = 0, hard = 0;
    int found = 0;
    if ((ret = memlimitsAccess(d->uuid, &cg, limits->nameSpace, 0, 0, &soft, &hard, &found)) != NVML_SUCCESS) {
        return ret;
    }
    if (!found) {
        return NVML_ERROR_NOT_FOUND; /* "if the limits were not found for this device and cgroup" */
    }
    limits->softLimit = soft;
    limits->hardLimit = hard;
    limits->currentUsed = 0;
    return NVML_SUCCESS;
}
#endif
