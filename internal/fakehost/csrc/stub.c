/*
 * stub.c - the body of every fake driver library that is not NVML or libcuda.
 * internal/fakehost compiles it once and links it under each SONAME.
 */
__attribute__((visibility("default"))) int fakehost_stub(void)
{
    return 0;
}
