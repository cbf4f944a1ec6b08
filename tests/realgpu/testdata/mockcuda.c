/*
 * mockcuda.c - a stand-in for the driver's libcuda.so.1 and libnvidia-ml.so.1 in gpu-probe's
 * tests (probe_test.go): the entry points gpu-probe calls, with "device memory" in host
 * memory, and behaviour chosen by the environment:
 *
 *   MOCKCUDA_INIT       cuInit's result (default 0)
 *   MOCKCUDA_DEVICES    the number of devices (default 1)
 *   MOCKCUDA_ALLOC      cuMemAlloc_v2's result (default 0)
 *   MOCKCUDA_READBACK   "wrong": cuMemcpyDtoH_v2 copies zeros
 *   MOCKCUDA_NVML_INIT  nvmlInit_v2's result (default 0)
 */
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;

static int envInt(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? atoi(v) : fallback;
}

API CUresult cuDriverGetVersion(int *version)
{
    *version = 13000;
    return 0;
}

API CUresult cuInit(unsigned int flags)
{
    (void)flags;
    return envInt("MOCKCUDA_INIT", 0);
}

API CUresult cuDeviceGetCount(int *count)
{
    *count = envInt("MOCKCUDA_DEVICES", 1);
    return 0;
}

API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (ordinal < 0 || ordinal >= envInt("MOCKCUDA_DEVICES", 1)) {
        return 101; /* CUDA_ERROR_INVALID_DEVICE */
    }
    *device = ordinal;
    return 0;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice device)
{
    static const char *names[] = {"Mock \"H100\" 80GB", "Mock B200"};
    strncpy(name, names[device % 2], (size_t)len - 1);
    name[len - 1] = '\0';
    return 0;
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device)
{
    *bytes = (size_t)(device == 0 ? 81559 : 182272) << 20;
    return 0;
}

static int context;

/* The SMs a context may use: MOCKCUDA_SMS of the device's 132 (as MPS's active thread
 * percentage would leave it); cuCtxGetExecAffinity is absent from the mock's view when
 * MOCKCUDA_SMS is unset, as on drivers before CUDA 11.4. */
API CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device)
{
    (void)device;
    if (attribute != 16) { /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
        return 1;
    }
    *value = 132;
    return 0;
}

typedef struct {
    int type;
    union {
        struct {
            unsigned int val;
        } smCount;
    } param;
} CUexecAffinityParam;

API CUresult cuCtxGetExecAffinity(CUexecAffinityParam *param, int type)
{
    if (type != 0 || getenv("MOCKCUDA_SMS") == NULL) {
        return 801; /* CUDA_ERROR_NOT_SUPPORTED */
    }
    param->type = 0;
    param->param.smCount.val = (unsigned int)envInt("MOCKCUDA_SMS", 132);
    return 0;
}

API CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice device)
{
    (void)flags;
    (void)device;
    *ctx = (CUcontext)&context;
    return 0;
}

API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    return ctx == (CUcontext)&context ? 0 : 201; /* CUDA_ERROR_INVALID_CONTEXT */
}

API CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes)
{
    int r = envInt("MOCKCUDA_ALLOC", 0);
    if (r != 0) {
        return r;
    }
    void *p = malloc(bytes);
    if (p == NULL) {
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    }
    *ptr = (CUdeviceptr)(unsigned long)p;
    return 0;
}

API CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    free((void *)(unsigned long)ptr);
    return 0;
}

API CUresult cuMemsetD32_v2(CUdeviceptr ptr, unsigned int value, size_t count)
{
    unsigned int *p = (unsigned int *)(unsigned long)ptr;
    for (size_t i = 0; i < count; i++) {
        p[i] = value;
    }
    return 0;
}

API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes)
{
    const char *readback = getenv("MOCKCUDA_READBACK");
    if (readback != NULL && strcmp(readback, "wrong") == 0) {
        memset(dst, 0, bytes);
    } else {
        memcpy(dst, (void *)(unsigned long)src, bytes);
    }
    return 0;
}

static const struct {
    CUresult code;
    const char *name, *message;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

API CUresult cuGetErrorName(CUresult error, const char **name)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        if (errors[i].code == error) {
            *name = errors[i].name;
            return 0;
        }
    }
    *name = NULL;
    return 1; /* CUDA_ERROR_INVALID_VALUE */
}

API CUresult cuGetErrorString(CUresult error, const char **message)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        if (errors[i].code == error) {
            *message = errors[i].message;
            return 0;
        }
    }
    *message = NULL;
    return 1;
}

API int nvmlInit_v2(void)
{
    return envInt("MOCKCUDA_NVML_INIT", 0);
}

API int nvmlShutdown(void)
{
    return 0;
}

API const char *nvmlErrorString(int result)
{
    return result == 9 ? "Driver Not Loaded" : "Unknown Error";
}
