/*
 * gpu-probe - what a container started through gpu-runtime can do with the CUDA driver, for
 * the real-GPU check (tests/realgpu/run.sh). It needs no CUDA headers or toolkit: it
 * dlopen()s the driver's libraries and declares the few entry points it calls itself.
 *
 *   gpu-probe               load libcuda.so.1, cuInit, list the devices, allocate, write,
 *                           read back and free 64 MiB on device 0
 *   gpu-probe nvml LIBRARY  time dlopen, nvmlInit_v2 and nvmlShutdown of an NVML library
 *
 * Every line it prints starts with "gpu-probe: " and is made of key=value fields (a value
 * with spaces is double-quoted), so a script can pick it out of other output. The last
 * line is "gpu-probe: result=..." and the exit status says the same:
 *
 *   0 ok              every step worked (cuda: at least one device)
 *   1 cuda-error      a CUDA or NVML call failed (call=, code=, name= say which)
 *   2 no-device       cuInit said CUDA_ERROR_NO_DEVICE (100), or there are 0 devices
 *   3 no-libcuda      libcuda.so.1 could not be loaded (error= is dlerror()); no-library
 *                     for the NVML library
 *   4 missing-symbol  the library lacks an entry point the probe needs (symbol=)
 *   64 usage
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The CUDA driver API as it is declared in cuda.h (CUDA 12 and 13). */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NO_DEVICE 100
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16

/* cuCtxGetExecAffinity's parameter (CUDA 11.4+): the SMs a context may use (under MPS, the
 * share's active thread percentage of them). */
typedef struct {
    int type; /* CU_EXEC_AFFINITY_TYPE_SM_COUNT = 0 */
    union {
        struct {
            unsigned int val;
        } smCount;
    } param;
} CUexecAffinityParam;

enum {
    EXIT_CUDA_ERROR = 1,
    EXIT_NO_DEVICE = 2,
    EXIT_NO_LIBRARY = 3,
    EXIT_MISSING_SYMBOL = 4,
    EXIT_USAGE = 64,
};

#define ALLOC_BYTES (64u << 20)
#define PATTERN 0x5a17c0deu

static struct {
    CUresult (*init)(unsigned int flags);
    CUresult (*driverGetVersion)(int *version);
    CUresult (*deviceGetCount)(int *count);
    CUresult (*deviceGet)(CUdevice *device, int ordinal);
    CUresult (*deviceGetName)(char *name, int len, CUdevice device);
    CUresult (*deviceTotalMem)(size_t *bytes, CUdevice device);
    CUresult (*ctxCreate)(CUcontext *ctx, unsigned int flags, CUdevice device);
    CUresult (*ctxDestroy)(CUcontext ctx);
    CUresult (*memAlloc)(CUdeviceptr *ptr, size_t bytes);
    CUresult (*memFree)(CUdeviceptr ptr);
    CUresult (*memsetD32)(CUdeviceptr ptr, unsigned int value, size_t count);
    CUresult (*memcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
    CUresult (*getErrorName)(CUresult error, const char **name);       /* optional */
    CUresult (*getErrorString)(CUresult error, const char **message);  /* optional */
    CUresult (*deviceGetAttribute)(int *value, int attribute, CUdevice device); /* optional */
    CUresult (*ctxGetExecAffinity)(CUexecAffinityParam *param, int type);      /* optional */
} cu;

/* quoted prints s as a double-quoted value, escaping quotes, backslashes and control bytes. */
static void quoted(const char *s)
{
    putchar('"');
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
        } else if (c < 0x20 || c == 0x7f) {
            printf("\\x%02x", c);
        } else {
            putchar(c);
        }
    }
    putchar('"');
}

static double msSince(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) * 1e3 + (double)(now.tv_nsec - start->tv_nsec) / 1e6;
}

static int noLibrary(const char *name, const char *result)
{
    const char *err = dlerror();
    printf("gpu-probe: library=%s loaded=no error=", name);
    quoted(err != NULL ? err : "unknown");
    printf("\ngpu-probe: result=%s\n", result);
    return EXIT_NO_LIBRARY;
}

static int missingSymbol(const char *symbol)
{
    printf("gpu-probe: result=missing-symbol symbol=%s\n", symbol);
    return EXIT_MISSING_SYMBOL;
}

/* cudaFailed reports a failed CUDA call; no device is its own result. */
static int cudaFailed(const char *call, CUresult r)
{
    const char *name = "unknown", *message = "unknown";
    if (cu.getErrorName != NULL) {
        cu.getErrorName(r, &name);
    }
    if (cu.getErrorString != NULL) {
        cu.getErrorString(r, &message);
    }
    if (r == CUDA_ERROR_NO_DEVICE) {
        printf("gpu-probe: result=no-device call=%s code=%d name=%s\n", call, r, name != NULL ? name : "unknown");
        return EXIT_NO_DEVICE;
    }
    printf("gpu-probe: result=cuda-error call=%s code=%d name=%s message=", call, r, name != NULL ? name : "unknown");
    quoted(message != NULL ? message : "unknown");
    putchar('\n');
    return EXIT_CUDA_ERROR;
}

#define LOAD(field, symbol)                                   \
    do {                                                      \
        *(void **)(&cu.field) = dlsym(lib, symbol);           \
        if (cu.field == NULL) {                               \
            return missingSymbol(symbol);                     \
        }                                                     \
    } while (0)

#define CHECK(call, expr)                                     \
    do {                                                      \
        CUresult r_ = (expr);                                 \
        if (r_ != CUDA_SUCCESS) {                             \
            return cudaFailed(call, r_);                      \
        }                                                     \
    } while (0)

/* allocCheck allocates on device, fills it with a pattern, reads it back and frees it. */
static int allocCheck(CUdevice device, int ordinal)
{
    CUcontext ctx;
    CUdeviceptr ptr;
    static unsigned int host[ALLOC_BYTES / sizeof(unsigned int)];
    CHECK("cuCtxCreate_v2", cu.ctxCreate(&ctx, 0, device));
    if (cu.ctxGetExecAffinity != NULL && cu.deviceGetAttribute != NULL) {
        CUexecAffinityParam affinity;
        int total = 0;
        memset(&affinity, 0, sizeof(affinity));
        if (cu.ctxGetExecAffinity(&affinity, 0) == CUDA_SUCCESS &&
            cu.deviceGetAttribute(&total, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) == CUDA_SUCCESS) {
            printf("gpu-probe: sm_count=%u of=%d\n", affinity.param.smCount.val, total);
        }
    }
    CHECK("cuMemAlloc_v2", cu.memAlloc(&ptr, ALLOC_BYTES));
    CHECK("cuMemsetD32_v2", cu.memsetD32(ptr, PATTERN, ALLOC_BYTES / sizeof(unsigned int)));
    CHECK("cuMemcpyDtoH_v2", cu.memcpyDtoH(host, ptr, ALLOC_BYTES));
    size_t bad = 0;
    for (size_t i = 0; i < ALLOC_BYTES / sizeof(unsigned int); i++) {
        bad += host[i] != PATTERN;
    }
    CHECK("cuMemFree_v2", cu.memFree(ptr));
    CHECK("cuCtxDestroy_v2", cu.ctxDestroy(ctx));
    printf("gpu-probe: alloc device=%d bytes=%u readback=%s\n", ordinal, ALLOC_BYTES, bad == 0 ? "ok" : "wrong");
    if (bad != 0) {
        printf("gpu-probe: result=cuda-error call=readback code=0 name=WRONG_DATA message=\"%zu of %zu words differ\"\n",
               bad, (size_t)(ALLOC_BYTES / sizeof(unsigned int)));
        return EXIT_CUDA_ERROR;
    }
    return 0;
}

static int probeCUDA(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        return noLibrary("libcuda.so.1", "no-libcuda");
    }
    LOAD(init, "cuInit");
    *(void **)(&cu.getErrorName) = dlsym(lib, "cuGetErrorName");
    *(void **)(&cu.getErrorString) = dlsym(lib, "cuGetErrorString");
    *(void **)(&cu.driverGetVersion) = dlsym(lib, "cuDriverGetVersion");
    *(void **)(&cu.deviceGetAttribute) = dlsym(lib, "cuDeviceGetAttribute");
    *(void **)(&cu.ctxGetExecAffinity) = dlsym(lib, "cuCtxGetExecAffinity");

    Dl_info info;
    char file[PATH_MAX] = "unknown";
    const char *loaded = "unknown";
    if (dladdr(*(void **)(&cu.init), &info) != 0 && info.dli_fname != NULL) {
        loaded = info.dli_fname;
        if (realpath(info.dli_fname, file) == NULL) {
            snprintf(file, sizeof(file), "unknown");
        }
    }
    printf("gpu-probe: library=libcuda.so.1 loaded=yes path=");
    quoted(loaded);
    printf(" file=");
    quoted(file);
    putchar('\n');
    int version = 0;
    if (cu.driverGetVersion != NULL && cu.driverGetVersion(&version) == CUDA_SUCCESS) {
        printf("gpu-probe: cuda_driver_version=%d.%d\n", version / 1000, version % 1000 / 10);
    }

    /* Every entry point before the first call: a stub libcuda is told apart from a GPU. */
    LOAD(deviceGetCount, "cuDeviceGetCount");
    LOAD(deviceGet, "cuDeviceGet");
    LOAD(deviceGetName, "cuDeviceGetName");
    LOAD(deviceTotalMem, "cuDeviceTotalMem_v2");
    LOAD(ctxCreate, "cuCtxCreate_v2");
    LOAD(ctxDestroy, "cuCtxDestroy_v2");
    LOAD(memAlloc, "cuMemAlloc_v2");
    LOAD(memFree, "cuMemFree_v2");
    LOAD(memsetD32, "cuMemsetD32_v2");
    LOAD(memcpyDtoH, "cuMemcpyDtoH_v2");

    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    CUresult r = cu.init(0);
    printf("gpu-probe: cuInit=%d ms=%.3f\n", r, msSince(&start));
    if (r != CUDA_SUCCESS) {
        return cudaFailed("cuInit", r);
    }
    int count = 0;
    CHECK("cuDeviceGetCount", cu.deviceGetCount(&count));
    printf("gpu-probe: devices=%d\n", count);
    if (count == 0) {
        printf("gpu-probe: result=no-device call=cuDeviceGetCount code=0 name=CUDA_SUCCESS\n");
        return EXIT_NO_DEVICE;
    }
    for (int i = 0; i < count; i++) {
        CUdevice device;
        char name[256] = "";
        size_t bytes = 0;
        CHECK("cuDeviceGet", cu.deviceGet(&device, i));
        CHECK("cuDeviceGetName", cu.deviceGetName(name, (int)sizeof(name), device));
        CHECK("cuDeviceTotalMem_v2", cu.deviceTotalMem(&bytes, device));
        printf("gpu-probe: device=%d name=", i);
        quoted(name);
        printf(" total_mib=%zu\n", bytes >> 20);
    }
    CUdevice first;
    CHECK("cuDeviceGet", cu.deviceGet(&first, 0));
    int rc = allocCheck(first, 0);
    if (rc != 0) {
        return rc;
    }
    printf("gpu-probe: result=ok devices=%d\n", count);
    return 0;
}

static int probeNVML(const char *path)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        return noLibrary(path, "no-library");
    }
    double openMs = msSince(&start);
    int (*init)(void), (*shutdown)(void);
    const char *(*errorString)(int);
    *(void **)(&init) = dlsym(lib, "nvmlInit_v2");
    *(void **)(&shutdown) = dlsym(lib, "nvmlShutdown");
    *(void **)(&errorString) = dlsym(lib, "nvmlErrorString");
    if (init == NULL) {
        return missingSymbol("nvmlInit_v2");
    }
    if (shutdown == NULL) {
        return missingSymbol("nvmlShutdown");
    }
    clock_gettime(CLOCK_MONOTONIC, &start);
    int r = init();
    double initMs = msSince(&start);
    if (r != 0) {
        printf("gpu-probe: result=cuda-error call=nvmlInit_v2 code=%d name=NVML message=", r);
        quoted(errorString != NULL ? errorString(r) : "unknown");
        putchar('\n');
        return EXIT_CUDA_ERROR;
    }
    clock_gettime(CLOCK_MONOTONIC, &start);
    r = shutdown();
    double shutdownMs = msSince(&start);
    printf("gpu-probe: nvml dlopen_ms=%.3f init_ms=%.3f shutdown_ms=%.3f shutdown=%d\n", openMs, initMs, shutdownMs, r);
    printf("gpu-probe: result=ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 1) {
        return probeCUDA();
    }
    if (argc == 3 && strcmp(argv[1], "nvml") == 0) {
        return probeNVML(argv[2]);
    }
    fprintf(stderr, "usage: gpu-probe               probe libcuda.so.1 and device 0\n"
                    "       gpu-probe nvml LIBRARY  time NVML initialisation\n"
                    "exit status: 0 ok, 1 CUDA or NVML error, 2 no device, 3 no library, 4 missing symbol\n");
    return EXIT_USAGE;
}
