/*
 * nvmlcheck.c - used by internal/fakehost's tests to check the fake NVML and libcuda
 * through plain dlopen/dlsym, for what go-nvml cannot reach (calls before nvmlInit, small
 * buffers, bad handles, reference counting).
 *
 * usage: nvmlcheck NVML_PATH GPU_COUNT FIRST_UUID LIBCUDA_PATH CUDA_VERSION
 * Prints one line per failed check and exits 1 if any failed.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    void *handle;
} nvmlDevice_t;

typedef int (*fn_void)(void);
typedef int (*fn_uintp)(unsigned int *);
typedef int (*fn_intp)(int *);
typedef int (*fn_index)(unsigned int, nvmlDevice_t *);
typedef int (*fn_str_dev)(const char *, nvmlDevice_t *);
typedef int (*fn_dev_buf)(nvmlDevice_t, char *, unsigned int);
typedef int (*fn_buf)(char *, unsigned int);
typedef int (*fn_dev_uintp)(nvmlDevice_t, unsigned int *);
typedef int (*fn_dev_uintp2)(nvmlDevice_t, unsigned int *, unsigned int *);
typedef const char *(*fn_errstr)(int);
typedef int (*fn_dev_uint_dev)(nvmlDevice_t, unsigned int, nvmlDevice_t *);
typedef int (*fn_dev_ptr)(nvmlDevice_t, void *);
typedef int (*fn_dev_uint_ptr)(nvmlDevice_t, unsigned int, void **);
typedef int (*fn_ptr_ptr)(void *, void *);
typedef int (*fn_ptrp)(void **);
typedef int (*fn_ptr)(void *);
typedef int (*fn_wait)(void *, void *, unsigned int);

/* nvmlMemory_v2_t and its version, NVML_STRUCT_VERSION(Memory, 2). */
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} memory_v2;
#define MEMORY_V2 ((unsigned int)(sizeof(memory_v2) | (2U << 24U)))

static int failures;

#define EXPECT(what, got, want)                                                          \
    do {                                                                                 \
        long long g_ = (long long)(got), w_ = (long long)(want);                         \
        if (g_ != w_) {                                                                  \
            printf("%s: got %lld, want %lld\n", what, g_, w_);                           \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (p == NULL) {
        printf("missing symbol %s\n", name);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        printf("usage: nvmlcheck NVML_PATH GPU_COUNT FIRST_UUID LIBCUDA_PATH CUDA_VERSION\n");
        return 2;
    }
    unsigned int wantCount = (unsigned int)atoi(argv[2]);
    const char *firstUUID = argv[3];

    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        printf("dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    fn_void init = (fn_void)sym(lib, "nvmlInit_v2");
    fn_void shutdown = (fn_void)sym(lib, "nvmlShutdown");
    fn_uintp count = (fn_uintp)sym(lib, "nvmlDeviceGetCount_v2");
    fn_index byIndex = (fn_index)sym(lib, "nvmlDeviceGetHandleByIndex_v2");
    fn_str_dev byUUID = (fn_str_dev)sym(lib, "nvmlDeviceGetHandleByUUID");
    fn_str_dev byBusID = (fn_str_dev)sym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    fn_dev_buf getUUID = (fn_dev_buf)sym(lib, "nvmlDeviceGetUUID");
    fn_dev_buf getName = (fn_dev_buf)sym(lib, "nvmlDeviceGetName");
    fn_buf driverVersion = (fn_buf)sym(lib, "nvmlSystemGetDriverVersion");
    fn_intp cudaVersion = (fn_intp)sym(lib, "nvmlSystemGetCudaDriverVersion");
    fn_dev_uintp getMinor = (fn_dev_uintp)sym(lib, "nvmlDeviceGetMinorNumber");
    fn_dev_uintp persistence = (fn_dev_uintp)sym(lib, "nvmlDeviceGetPersistenceMode");
    fn_dev_uintp isMig = (fn_dev_uintp)sym(lib, "nvmlDeviceIsMigDeviceHandle");
    fn_dev_uintp2 migMode = (fn_dev_uintp2)sym(lib, "nvmlDeviceGetMigMode");
    fn_errstr errorString = (fn_errstr)sym(lib, "nvmlErrorString");
    fn_dev_uint_dev migByIndex = (fn_dev_uint_dev)sym(lib, "nvmlDeviceGetMigDeviceHandleByIndex");
    fn_dev_ptr memoryV2 = (fn_dev_ptr)sym(lib, "nvmlDeviceGetMemoryInfo_v2");
    fn_dev_ptr attributes = (fn_dev_ptr)sym(lib, "nvmlDeviceGetAttributes_v2");
    fn_dev_uintp giID = (fn_dev_uintp)sym(lib, "nvmlDeviceGetGpuInstanceId");
    fn_dev_uint_ptr giByID = (fn_dev_uint_ptr)sym(lib, "nvmlDeviceGetGpuInstanceById");
    fn_ptr_ptr giInfo = (fn_ptr_ptr)sym(lib, "nvmlGpuInstanceGetInfo");
    fn_ptrp setCreate = (fn_ptrp)sym(lib, "nvmlEventSetCreate");
    fn_ptr setFree = (fn_ptr)sym(lib, "nvmlEventSetFree");
    fn_wait setWait = (fn_wait)sym(lib, "nvmlEventSetWait_v2");

    unsigned int n = 0;
    char buf[128];
    nvmlDevice_t dev = {0}, other = {0};

    /* Before init. */
    EXPECT("count before init", count(&n), 1);
    EXPECT("driver version before init", driverVersion(buf, sizeof(buf)), 1);
    EXPECT("shutdown before init", shutdown(), 1);
    void *set = NULL;
    char data[64];
    EXPECT("event set before init", setCreate(&set), 1);
    EXPECT("event wait before init", setWait(NULL, data, 0), 1);
    if (strcmp(errorString(7), "Insufficient Size") != 0) {
        printf("nvmlErrorString(7) = %s\n", errorString(7));
        failures++;
    }

    EXPECT("init", init(), 0);
    EXPECT("count", count(&n), 0);
    EXPECT("count value", n, wantCount);
    EXPECT("count NULL", count(NULL), 2);
    EXPECT("handle past the last index", byIndex(wantCount, &dev), 2);
    EXPECT("unknown UUID", byUUID("GPU-00000000-0000-0000-0000-000000000000", &dev), 6);
    EXPECT("malformed bus id", byBusID("not-a-bus-id", &dev), 2);
    EXPECT("driver version in 3 bytes", driverVersion(buf, 3), 7);

    nvmlDevice_t bogus = {(void *)buf};
    EXPECT("UUID of a bogus handle", getUUID(bogus, buf, sizeof(buf)), 2);
    EXPECT("minor of a NULL handle", getMinor((nvmlDevice_t){NULL}, &n), 2);
    EXPECT("info of a bogus GPU instance", giInfo(buf, data), 2);
    EXPECT("event set into NULL", setCreate(NULL), 2);
    EXPECT("free a bogus event set", setFree(buf), 2);
    EXPECT("wait on a bogus event set", setWait(buf, data, 0), 2);
    EXPECT("event set", setCreate(&set), 0);
    EXPECT("wait into NULL", setWait(set, NULL, 0), 2);
    EXPECT("wait without registrations", setWait(set, data, 0), 10);
    EXPECT("free the event set", setFree(set), 0);

    if (wantCount > 0) {
        EXPECT("handle 0", byIndex(0, &dev), 0);
        size_t len = strlen(firstUUID);
        EXPECT("UUID in len bytes", getUUID(dev, buf, (unsigned int)len), 7);
        EXPECT("UUID in len+1 bytes", getUUID(dev, buf, (unsigned int)len + 1), 0);
        if (strcmp(buf, firstUUID) != 0) {
            printf("UUID of GPU 0: got %s, want %s\n", buf, firstUUID);
            failures++;
        }
        EXPECT("UUID into NULL", getUUID(dev, NULL, 96), 2);
        EXPECT("name in 4 bytes", getName(dev, buf, 4), 7);
        nvmlDevice_t misaligned = {(char *)dev.handle + 1};
        EXPECT("name of a misaligned handle", getName(misaligned, buf, sizeof(buf)), 2);

        EXPECT("handle by UUID", byUUID(firstUUID, &other), 0);
        EXPECT("handle by UUID is handle 0", other.handle == dev.handle, 1);

        /* GPU 0 of Default is a MIG-capable A100 with MIG mode disabled. */
        unsigned int current = 7, pending = 7, mode = 0, mig = 7, id = 0;
        EXPECT("MIG mode", migMode(dev, &current, &pending), 0);
        EXPECT("MIG mode current", current, 0);
        EXPECT("MIG mode pending", pending, 0);
        EXPECT("MIG mode into NULL", migMode(dev, NULL, &pending), 2);
        EXPECT("MIG device of a GPU without MIG mode", migByIndex(dev, 0, &other), 2);
        EXPECT("MIG device into NULL", migByIndex(dev, 0, NULL), 2);
        EXPECT("GPU instance of a GPU without MIG mode", giByID(dev, 1, &set), 3);
        EXPECT("attributes of a GPU", attributes(dev, data), 3);
        EXPECT("GPU instance id of a GPU", giID(dev, &id), 3);
        memory_v2 m2 = {.version = 0};
        EXPECT("memory v2 without version", memoryV2(dev, &m2), 25);
        m2.version = MEMORY_V2;
        EXPECT("memory v2", memoryV2(dev, &m2), 0);
        EXPECT("memory v2 total", m2.total, 81920ULL << 20);
        EXPECT("memory v2 free", m2.free + m2.used, m2.total);
        EXPECT("persistence mode", persistence(dev, &mode), 0);
        EXPECT("persistence mode value", mode, 1);
        EXPECT("is MIG device handle", isMig(dev, &mig), 0);
        EXPECT("is MIG device handle value", mig, 0);
    }

    /* Reference counting: every init needs its shutdown. */
    EXPECT("second init", init(), 0);
    EXPECT("first shutdown", shutdown(), 0);
    EXPECT("count while still initialized", count(&n), 0);
    EXPECT("second shutdown", shutdown(), 0);
    EXPECT("count after shutdown", count(&n), 1);
    EXPECT("extra shutdown", shutdown(), 1);

    void *cuda = dlopen(argv[4], RTLD_NOW | RTLD_LOCAL);
    if (cuda == NULL) {
        printf("dlopen %s: %s\n", argv[4], dlerror());
        return 1;
    }
    fn_intp cuDriverGetVersion = (fn_intp)sym(cuda, "cuDriverGetVersion");
    int v = 0;
    EXPECT("cuInit", ((int (*)(unsigned int))sym(cuda, "cuInit"))(0), 0);
    EXPECT("cuDriverGetVersion", cuDriverGetVersion(&v), 0);
    EXPECT("cuDriverGetVersion value", v, atoi(argv[5]));
    EXPECT("NVML CUDA version", cudaVersion(&v), 1); /* shut down by now */

    return failures > 0 ? 1 : 0;
}
