/* fake_nvtx.c — a minimal NVTX tool ("injection library") for the marker
 * tests: NVTX_INJECTION64_PATH points at it, NVTX's one-time init calls
 * InitializeInjectionNvtx2, and it installs domain create / range push /
 * range pop through NVTX's callback export table, as Nsight or a CUPTI
 * collector does. Like fake_roctx.c it reports at unload:
 *
 *   nvtxfake: push=N pop=M rejected=0 underflow=U domain=<name>
 *
 * FAKE_NVTX_NO_POP=1 leaves pop uninstalled (a tool that does not handle
 * domain ranges), FAKE_ROCTX_ECHO=1 echoes "nvtxfake push <text>".
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

#define EXPORT __attribute__((visibility("default")))

static uint64_t n_push, n_pop, n_underflow;
static _Thread_local int depth;
static char domain_name[64] = "(none)";
static int domain_token;
static int echo;

static void out(const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(STDOUT_FILENO, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void out_u64(uint64_t v)
{
    char tmp[24], rev[24];
    size_t n = 0;
    do {
        rev[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        tmp[i] = rev[n - 1 - i];
    tmp[n] = '\0';
    out(tmp);
}

__attribute__((destructor)) static void fake_unload(void)
{
    out("nvtxfake: push=");
    out_u64(__atomic_load_n(&n_push, __ATOMIC_RELAXED));
    out(" pop=");
    out_u64(__atomic_load_n(&n_pop, __ATOMIC_RELAXED));
    out(" rejected=0 underflow=");
    out_u64(__atomic_load_n(&n_underflow, __ATOMIC_RELAXED));
    out(" domain=");
    out(domain_name);
    out("\n");
}

static nvtxDomainHandle_t fake_domain_create(const char *name)
{
    size_t n = strnlen(name, sizeof domain_name - 1);
    memcpy(domain_name, name, n);
    domain_name[n] = '\0';
    return (nvtxDomainHandle_t)(void *)&domain_token;
}

static int fake_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr)
{
    (void)domain;
    __atomic_add_fetch(&n_push, 1, __ATOMIC_RELAXED);
    if (echo && attr->messageType == NVTX_MESSAGE_TYPE_ASCII) {
        out("nvtxfake push ");
        out(attr->message.ascii);
        out("\n");
    }
    return depth++;
}

static int fake_pop(nvtxDomainHandle_t domain)
{
    (void)domain;
    __atomic_add_fetch(&n_pop, 1, __ATOMIC_RELAXED);
    if (depth == 0) {
        __atomic_add_fetch(&n_underflow, 1, __ATOMIC_RELAXED);
        return -1;
    }
    return --depth;
}

/* Function pointers of different types share NVTX's generic slot type;
 * NVTX casts them back to the documented signature before calling. */
static void install(NvtxFunctionTable table, unsigned size, unsigned id, NvtxFunctionPointer fn)
{
    if (id < size && table[id])
        *table[id] = fn;
}

EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table);
EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table)
{
    const NvtxExportTableCallbacks *cb = get_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned size = 0;
    const char *e = getenv("FAKE_ROCTX_ECHO");
    echo = e && e[0] == '1';
    if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || !table)
        return 0;
    install(table, size, NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)fake_domain_create);
    install(table, size, NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)fake_push);
    const char *no_pop = getenv("FAKE_NVTX_NO_POP");
    if (!(no_pop && no_pop[0] == '1'))
        install(table, size, NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)fake_pop);
    return 1;
}
