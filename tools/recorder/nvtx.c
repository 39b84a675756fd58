/* nvtx.c — the recorder as an NVTX v3 injection library.
 *
 * NVTX (header-only, in the traced program) finds a tool either through
 * NVTX_INJECTION64_PATH (it dlopens the path and calls
 * InitializeInjectionNvtx2) or, with no path set, through a global symbol
 * InitializeInjectionNvtx2Preinject, which a preloaded recorder provides.
 * The tool fills slots of NVTX's per-module function tables; slots we leave
 * alone stay no-ops.
 *
 * Domain and registered-string handles are our own structs, allocated once
 * per create/register call and owned by the recorder until the domain is
 * destroyed (domains) or the process ends (strings: NVTX never releases
 * them).
 */
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pmraw.h"
#include "recorder.h"

#define PMR_EXPORT __attribute__((visibility("default")))
#define PMR_WIDE_MAX 256

struct nvtxDomainRegistration_st {
    unsigned id; /* pmraw domain id */
};

struct nvtxStringRegistration_st {
    char *text;
};

static _Atomic unsigned g_next_domain = PMR_DOMAIN_FIRST_USER;

static unsigned domain_id(nvtxDomainHandle_t d)
{
    return d ? d->id : PMR_DOMAIN_NVTX;
}

/* Wide text as ASCII ('?' for anything else), cut at PMR_WIDE_MAX-1. */
static const char *narrow(const wchar_t *w, char out[PMR_WIDE_MAX])
{
    size_t i = 0;
    for (; w && w[i] && i < PMR_WIDE_MAX - 1; i++)
        out[i] = (w[i] > 0 && w[i] < 128) ? (char)w[i] : '?';
    out[i] = 0;
    return out;
}

/* The message of an event attribute block, whatever its type. */
static const char *message_of(const nvtxEventAttributes_t *a, char wide[PMR_WIDE_MAX])
{
    if (!a || a->size < offsetof(nvtxEventAttributes_t, message) + sizeof a->message)
        return "";
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
        return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_UNICODE:
        return narrow(a->message.unicode, wide);
    case NVTX_MESSAGE_TYPE_REGISTERED:
        return a->message.registered ? a->message.registered->text : "";
    default:
        return "";
    }
}

static int NVTX_API range_push_a(const char *m) { return pm__rec_push(PMR_DOMAIN_NVTX, m); }
static int NVTX_API range_pop(void) { return pm__rec_pop(PMR_DOMAIN_NVTX); }
static void NVTX_API mark_a(const char *m) { pm__rec_mark(PMR_DOMAIN_NVTX, m); }

static int NVTX_API range_push_ex(const nvtxEventAttributes_t *a)
{
    char w[PMR_WIDE_MAX];
    return pm__rec_push(PMR_DOMAIN_NVTX, message_of(a, w));
}

static void NVTX_API mark_ex(const nvtxEventAttributes_t *a)
{
    char w[PMR_WIDE_MAX];
    pm__rec_mark(PMR_DOMAIN_NVTX, message_of(a, w));
}

static nvtxRangeId_t NVTX_API range_start_a(const char *m)
{
    return pm__rec_start(PMR_DOMAIN_NVTX, m);
}

static nvtxRangeId_t NVTX_API range_start_ex(const nvtxEventAttributes_t *a)
{
    char w[PMR_WIDE_MAX];
    return pm__rec_start(PMR_DOMAIN_NVTX, message_of(a, w));
}

static void NVTX_API range_end(nvtxRangeId_t id) { pm__rec_stop(PMR_DOMAIN_NVTX, id); }

static int NVTX_API domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char w[PMR_WIDE_MAX];
    return pm__rec_push(domain_id(d), message_of(a, w));
}

static int NVTX_API domain_pop(nvtxDomainHandle_t d) { return pm__rec_pop(domain_id(d)); }

static void NVTX_API domain_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char w[PMR_WIDE_MAX];
    pm__rec_mark(domain_id(d), message_of(a, w));
}

static nvtxRangeId_t NVTX_API domain_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char w[PMR_WIDE_MAX];
    return pm__rec_start(domain_id(d), message_of(a, w));
}

static void NVTX_API domain_end(nvtxDomainHandle_t d, nvtxRangeId_t id)
{
    pm__rec_stop(domain_id(d), id);
}

/* Domains past the 253 ids a raw event can carry share the default one. */
static nvtxDomainHandle_t NVTX_API domain_create_a(const char *name)
{
    nvtxDomainHandle_t d = malloc(sizeof *d);
    if (!d)
        return NULL;
    unsigned id = atomic_fetch_add(&g_next_domain, 1);
    d->id = id <= 255 ? id : PMR_DOMAIN_NVTX;
    if (d->id != PMR_DOMAIN_NVTX)
        pm__rec_domain_name(d->id, name ? name : "");
    return d;
}

static nvtxDomainHandle_t NVTX_API domain_create_w(const wchar_t *name)
{
    char w[PMR_WIDE_MAX];
    return domain_create_a(narrow(name, w));
}

static void NVTX_API domain_destroy(nvtxDomainHandle_t d) { free(d); }

static nvtxStringHandle_t NVTX_API register_string_a(nvtxDomainHandle_t d, const char *s)
{
    (void)d;
    nvtxStringHandle_t h = malloc(sizeof *h);
    size_t n = s ? strlen(s) : 0;
    char *copy = malloc(n + 1);
    if (!h || !copy) {
        free(h);
        free(copy);
        return NULL;
    }
    if (n)
        memcpy(copy, s, n);
    copy[n] = 0;
    h->text = copy;
    return h;
}

static nvtxStringHandle_t NVTX_API register_string_w(nvtxDomainHandle_t d, const wchar_t *s)
{
    char w[PMR_WIDE_MAX];
    return register_string_a(d, narrow(s, w));
}

typedef struct slot {
    unsigned id;
    NvtxFunctionPointer fn;
} slot;

#define FN(f) ((NvtxFunctionPointer)(void (*)(void))(f))

static int fill(NvtxGetExportTableFunc_t get, NvtxCallbackModule module,
                const slot *slots, size_t n)
{
    const NvtxExportTableCallbacks *cb = get(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned size = 0;
    if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable ||
        !cb->GetModuleFunctionTable(module, &table, &size) || !table)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (slots[i].id <= size && table[slots[i].id])
            *table[slots[i].id] = slots[i].fn;
    return 1;
}

PMR_EXPORT int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get);
PMR_EXPORT int NVTX_API InitializeInjectionNvtx2Preinject(NvtxGetExportTableFunc_t get);

int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    static const slot core[] = {
        {NVTX_CBID_CORE_MarkEx, FN(mark_ex)},
        {NVTX_CBID_CORE_MarkA, FN(mark_a)},
        {NVTX_CBID_CORE_RangeStartEx, FN(range_start_ex)},
        {NVTX_CBID_CORE_RangeStartA, FN(range_start_a)},
        {NVTX_CBID_CORE_RangeEnd, FN(range_end)},
        {NVTX_CBID_CORE_RangePushEx, FN(range_push_ex)},
        {NVTX_CBID_CORE_RangePushA, FN(range_push_a)},
        {NVTX_CBID_CORE_RangePop, FN(range_pop)},
    };
    static const slot core2[] = {
        {NVTX_CBID_CORE2_DomainMarkEx, FN(domain_mark_ex)},
        {NVTX_CBID_CORE2_DomainRangeStartEx, FN(domain_start_ex)},
        {NVTX_CBID_CORE2_DomainRangeEnd, FN(domain_end)},
        {NVTX_CBID_CORE2_DomainRangePushEx, FN(domain_push_ex)},
        {NVTX_CBID_CORE2_DomainRangePop, FN(domain_pop)},
        {NVTX_CBID_CORE2_DomainRegisterStringA, FN(register_string_a)},
        {NVTX_CBID_CORE2_DomainRegisterStringW, FN(register_string_w)},
        {NVTX_CBID_CORE2_DomainCreateA, FN(domain_create_a)},
        {NVTX_CBID_CORE2_DomainCreateW, FN(domain_create_w)},
        {NVTX_CBID_CORE2_DomainDestroy, FN(domain_destroy)},
    };
    if (!get)
        return 0;
    int ok = fill(get, NVTX_CB_MODULE_CORE, core, sizeof core / sizeof core[0]);
    ok &= fill(get, NVTX_CB_MODULE_CORE2, core2, sizeof core2 / sizeof core2[0]);
    return ok;
}

int NVTX_API InitializeInjectionNvtx2Preinject(NvtxGetExportTableFunc_t get)
{
    return InitializeInjectionNvtx2(get);
}
