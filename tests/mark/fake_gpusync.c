/* fake_gpusync.c — a preloaded stand-in for the GPU runtimes' waiting and
 * timing calls, for the contract's "no GPU work in the marker layer" case.
 *
 * It defines the HIP, CUDA runtime and CUDA driver functions a marker
 * layer could use to synchronize or time (device, stream and event
 * synchronization, event creation, recording and elapsed time), counts
 * every call, and writes "gpusync: calls=N" at exit. Preloaded, these
 * definitions are what any lookup in the global scope finds (dlsym of
 * RTLD_DEFAULT, a call through the PLT), and the test also puts this
 * library on the library path under the runtimes' file names, so a dlopen
 * of libamdhip64.so / libcudart.so / libcuda.so.1 maps it too: a layer that
 * synchronized at run time is counted, not just one that linked a runtime.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static uint64_t n_calls;

static int count(void)
{
    __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);
    return 0;
}

#define FAKE(name) EXPORT int name(void); EXPORT int name(void) { return count(); }
FAKE(hipDeviceSynchronize)
FAKE(hipStreamSynchronize)
FAKE(hipEventCreate)
FAKE(hipEventRecord)
FAKE(hipEventSynchronize)
FAKE(hipEventElapsedTime)
FAKE(hipStreamQuery)
FAKE(cudaDeviceSynchronize)
FAKE(cudaStreamSynchronize)
FAKE(cudaEventCreate)
FAKE(cudaEventRecord)
FAKE(cudaEventSynchronize)
FAKE(cudaEventElapsedTime)
FAKE(cudaStreamQuery)
FAKE(cuCtxSynchronize)
FAKE(cuStreamSynchronize)
FAKE(cuEventCreate)
FAKE(cuEventRecord)
FAKE(cuEventSynchronize)
FAKE(cuEventElapsedTime)

__attribute__((destructor)) static void report(void)
{
    char line[64] = "gpusync: calls=";
    size_t n = strlen(line);
    uint64_t v = __atomic_load_n(&n_calls, __ATOMIC_RELAXED);
    char d[24];
    size_t k = 0;
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (k)
        line[n++] = d[--k];
    line[n++] = '\n';
    ssize_t w = write(STDOUT_FILENO, line, n);
    (void)w;
}
