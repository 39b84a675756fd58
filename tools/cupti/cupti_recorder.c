/* cupti_recorder.c — kernel, memory-copy and launch-API records through
 * CUPTI, for `phasemark capture --kernels` on NVIDIA.
 *
 * Loaded by the CUDA driver through CUDA_INJECTION64_PATH, which calls
 * InitializeInjection() at cuInit. Activity records (kernels, copies) are
 * stamped by CUPTI on our clock: a timestamp callback returns
 * CLOCK_BOOTTIME nanoseconds, the clock of the range recorder and of
 * rocprofv3, so kernels and ranges line up. Launch calls (runtime and
 * driver API) are recorded from CUPTI callbacks with the calling thread's
 * kernel tid; their correlation id is the one the activity records carry,
 * which is how `report` projects kernel time onto the enclosing ranges.
 *
 * Output, per process, in PHASEMARK_CAPTURE_DIR (merged by capture):
 *   <pid>.<ns>.kernels.csv  rocprofv3 kernel-trace column names
 *   <pid>.<ns>.copies.csv   rocprofv3 memory-copy column names
 *   <pid>.<ns>.api.csv      rocprofv3 API-trace column names (CUDA_*_API)
 * API rows are written at the call's exit under one mutex (a CUDA call
 * costs microseconds; the lock is not the bottleneck). Activity buffers
 * are written as CUPTI completes them and at exit (cuptiActivityFlushAll).
 * A process killed by a signal loses the activity records not yet
 * completed; the API rows written so far stay.
 */
#define _GNU_SOURCE
#include <cupti.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PMC_EXPORT __attribute__((visibility("default")))
#define PMC_BUF_BYTES (8u << 20)
#define PMC_ALIGN 8

/* The three output files; written under g_lock. */
static FILE *g_kernels, *g_copies, *g_api;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_SubscriberHandle g_sub;
static uint32_t g_pid;

static uint64_t CUPTIAPI boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void csv_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static const char *copy_direction(uint8_t kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "MEMORY_COPY_HOST_TO_DEVICE";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "MEMORY_COPY_DEVICE_TO_HOST";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "MEMORY_COPY_DEVICE_TO_DEVICE";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "MEMORY_COPY_HOST_TO_HOST";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "MEMORY_COPY_PEER_TO_PEER";
    default: return "MEMORY_COPY_OTHER";
    }
}

/* Grid sizes in work items (blocks x threads), as rocprofv3 reports them. */
static void write_kernel(const CUpti_ActivityKernel10 *k)
{
    fprintf(g_kernels, "\"KERNEL_DISPATCH\",\"GPU %u\",%u,%u,,%lld,0,", k->deviceId, k->contextId,
            k->streamId, (long long)k->gridId);
    csv_string(g_kernels, k->name);
    fprintf(g_kernels, ",%u,%llu,%llu,%u,%d,%d,%d,%lld,%lld,%lld,%u\n", k->correlationId,
            (unsigned long long)k->start, (unsigned long long)k->end, g_pid, k->blockX, k->blockY,
            k->blockZ, (long long)k->gridX * k->blockX, (long long)k->gridY * k->blockY,
            (long long)k->gridZ * k->blockZ, k->staticSharedMemory + k->dynamicSharedMemory);
}

static void write_copy(const CUpti_ActivityMemcpy6 *m)
{
    int to_device = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    int from_device = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    fprintf(g_copies, "\"MEMORY_COPY\",\"%s\",%u,\"%s\",\"%s\",%u,%llu,%llu,%llu,%u\n",
            copy_direction(m->copyKind), m->streamId, to_device ? "Host" : "GPU",
            from_device ? "Host" : "GPU", m->correlationId, (unsigned long long)m->start,
            (unsigned long long)m->end, (unsigned long long)m->bytes, g_pid);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(PMC_ALIGN, PMC_BUF_BYTES);
    *size = *buffer ? PMC_BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&g_lock);
    while (g_kernels && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL)
            write_kernel((const CUpti_ActivityKernel10 *)rec);
        else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY)
            write_copy((const CUpti_ActivityMemcpy6 *)rec);
    }
    pthread_mutex_unlock(&g_lock);
    free(buffer);
}

/* Launch and other API calls: start at enter (kept in correlationData),
 * the row at exit. */
static void CUPTIAPI api_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                  const void *data)
{
    (void)user;
    (void)cbid;
    const CUpti_CallbackData *cb = data;
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API)
        return;
    if (cb->callbackSite == CUPTI_API_ENTER) {
        *cb->correlationData = boottime_ns();
        return;
    }
    uint64_t end = boottime_ns();
    pthread_mutex_lock(&g_lock);
    if (g_api) {
        fputs(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "\"CUDA_RUNTIME_API\"," : "\"CUDA_DRIVER_API\",", g_api);
        csv_string(g_api, cb->functionName);
        fprintf(g_api, ",%u,%d,%u,%llu,%llu\n", g_pid, (int)gettid(), cb->correlationId,
                (unsigned long long)*cb->correlationData, (unsigned long long)end);
    }
    pthread_mutex_unlock(&g_lock);
}

static FILE *open_out(const char *dir, uint64_t stamp, const char *suffix, const char *header)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%u.%llu.%s", dir, g_pid, (unsigned long long)stamp, suffix);
    FILE *f = fopen(path, "we");
    if (f)
        fputs(header, f);
    return f;
}

static void at_exit(void)
{
    cuptiActivityFlushAll(1);
    if (g_sub)
        cuptiUnsubscribe(g_sub);
    pthread_mutex_lock(&g_lock);
    FILE *files[3] = {g_kernels, g_copies, g_api};
    g_kernels = g_copies = g_api = NULL;
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < 3; i++)
        if (files[i])
            fclose(files[i]);
}

static int open_outputs(const char *dir)
{
    uint64_t stamp = boottime_ns();
    g_pid = (uint32_t)getpid();
    g_kernels = open_out(dir, stamp, "kernels.csv",
                         "\"Kind\",\"Agent_Id\",\"Queue_Id\",\"Stream_Id\",\"Thread_Id\",\"Dispatch_Id\","
                         "\"Kernel_Id\",\"Kernel_Name\",\"Correlation_Id\",\"Start_Timestamp\","
                         "\"End_Timestamp\",\"Process_Id\",\"Workgroup_Size_X\",\"Workgroup_Size_Y\","
                         "\"Workgroup_Size_Z\",\"Grid_Size_X\",\"Grid_Size_Y\",\"Grid_Size_Z\","
                         "\"LDS_Block_Size\"\n");
    g_copies = open_out(dir, stamp, "copies.csv",
                        "\"Kind\",\"Direction\",\"Stream_Id\",\"Source_Agent_Id\",\"Destination_Agent_Id\","
                        "\"Correlation_Id\",\"Start_Timestamp\",\"End_Timestamp\",\"Bytes\",\"Process_Id\"\n");
    g_api = open_out(dir, stamp, "api.csv",
                     "\"Domain\",\"Function\",\"Process_Id\",\"Thread_Id\",\"Correlation_Id\","
                     "\"Start_Timestamp\",\"End_Timestamp\"\n");
    return g_kernels && g_copies && g_api ? 0 : -1;
}

/* Returns 1 (success) even when not under capture, so the driver carries
 * on; CUPTI failures leave the program running unrecorded, with a line on
 * stderr. */
PMC_EXPORT int InitializeInjection(void);

int InitializeInjection(void)
{
    const char *dir = getenv("PHASEMARK_CAPTURE_DIR");
    if (!dir || !*dir)
        return 1;
    if (open_outputs(dir) < 0) {
        fprintf(stderr, "phasemark cupti: cannot write to %s\n", dir);
        return 1;
    }
    CUptiResult r = cuptiActivityRegisterTimestampCallback(boottime_ns);
    if (r == CUPTI_SUCCESS)
        r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r == CUPTI_SUCCESS)
        r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r == CUPTI_SUCCESS)
        r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    if (r == CUPTI_SUCCESS)
        r = cuptiSubscribe(&g_sub, api_callback, NULL);
    if (r == CUPTI_SUCCESS)
        r = cuptiEnableDomain(1, g_sub, CUPTI_CB_DOMAIN_RUNTIME_API);
    if (r == CUPTI_SUCCESS)
        r = cuptiEnableDomain(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API);
    if (r != CUPTI_SUCCESS) {
        const char *msg = "unknown";
        cuptiGetResultString(r, &msg);
        fprintf(stderr, "phasemark cupti: CUPTI setup failed: %s\n", msg);
    }
    atexit(at_exit);
    return 1;
}
