/* cuda_prog.c — a tiny CUDA program for the CUPTI capture test, written
 * against the driver API loaded with dlopen (no CUDA toolkit needed to
 * build it; exits 77 where no driver or GPU exists). Ranges and work:
 *   prefill: copy host->device, launch pm_fill(7)
 *   decode:  launch pm_fill(9), synchronize
 *   outside any range: copy device->host (checks the value, 9)
 */
#define _GNU_SOURCE
#include <phasemark/mark.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
typedef unsigned long long CUdeviceptr;

/* A kernel that stores v at *p, in PTX (JIT-compiled by the driver). */
static const char g_ptx[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry pm_fill(.param .u64 p, .param .u32 v)\n{\n"
    "  .reg .b64 %rd<3>;\n  .reg .b32 %r<2>;\n"
    "  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r1, [v];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n  st.global.u32 [%rd2], %r1;\n  ret;\n}\n";

typedef struct drv {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_set)(CUcontext);
    CUresult (*module_load)(CUmodule *, const void *);
    CUresult (*get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*sync)(void);
} drv;

static int load(drv *d)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h)
        return -1;
    static const char *const names[] = {
        "cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuModuleLoadData",
        "cuModuleGetFunction", "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuLaunchKernel",
        "cuCtxSynchronize"};
    void **slots = (void **)d;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(slots[i] = dlsym(h, names[i])))
            return -1;
    return 0;
}

static int fill(drv *d, CUfunction f, CUdeviceptr p, unsigned v)
{
    void *args[] = {&p, &v};
    return d->launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
}

int main(void)
{
#ifdef PHASEMARK_DISABLED
    fprintf(stderr, "markers compiled out\n");
    return 77;
#else
    drv d;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUdeviceptr p;
    if (load(&d) < 0 || d.init(0) != 0 || d.device_get(&dev, 0) != 0) {
        fprintf(stderr, "no CUDA driver or GPU\n");
        return 77;
    }
    if (d.primary_retain(&ctx, dev) || d.ctx_set(ctx) || d.module_load(&mod, g_ptx) ||
        d.get_function(&fn, mod, "pm_fill") || d.mem_alloc(&p, 4))
        return 1;
    unsigned host = 1;
    pm_range pre = pm_prefill_push(1, 0, 4);
    int rc = d.htod(p, &host, 4) | fill(&d, fn, p, 7);
    pm_range_pop(&pre);
    pm_range dec = pm_decode_push(1, 4);
    rc |= fill(&d, fn, p, 9) | d.sync();
    pm_range_pop(&dec);
    rc |= d.dtoh(&host, p, 4);
    if (rc || host != 9) {
        fprintf(stderr, "CUDA work failed (rc %d, value %u)\n", rc, host);
        return 1;
    }
    return 0;
#endif
}
