/*
 * fakecuda.c - a fake libcuda.so for gpu-runtime's tests.
 *
 * internal/fakehost compiles it with -DFAKEHOST_CUDA_VERSION=<n> (NVML/CUDA
 * form: 12040 is CUDA 12.4). Only the two entry points the runtime's tests
 * need are provided.
 */
#define API __attribute__((visibility("default")))

typedef int CUresult; /* CUDA_SUCCESS is 0, CUDA_ERROR_INVALID_VALUE is 1 */

API CUresult cuInit(unsigned int flags)
{
    (void)flags;
    return 0;
}

API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == 0) {
        return 1;
    }
    *driverVersion = FAKEHOST_CUDA_VERSION;
    return 0;
}
