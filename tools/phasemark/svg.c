/* svg.c — the timeline picture, as an SVG file or one self-contained HTML
 * file (the same SVG inline; no script, no network).
 *
 * One lane per process and thread (named by pmt_lane_names), then one per
 * GPU stream; ranges nested by containment are stacked one row per depth
 * (up to PMT_TIMELINE_DEPTH; deeper ones share the last row) and coloured
 * by kind, layer ranges by mode. A time axis with 1-2-5 ticks in ns, us, ms
 * or s runs over the trace's span from its first start; a legend lists the
 * kinds and modes present. Every bar has a <title> (the browser's tooltip)
 * and, where it is wide enough, a label.
 *
 * Level of detail: the time axis is PMT_TIMELINE_WIDTH pixel columns. A
 * range narrower than one column, or one that starts before the previous
 * bar of its row ends (overlaps at the last depth, bad nesting), is not
 * drawn; its duration is added to the column of its start in its row, and
 * each run of columns with the same kind and the same busy share (in
 * eighths, rounded up) becomes one density bar of that kind's colour (grey
 * when kinds mix) with opacity = the share. A row therefore holds at most
 * one bar per column plus one density bar per column, whatever the number
 * of ranges: size grows with busy rows, not with ranges.
 */
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#define TL_LEFT 340.0                    /* px for lane labels */
#define TL_WIDTH ((double)PMT_TIMELINE_WIDTH)
#define TL_ROW 16.0                      /* px per nesting level */
#define TL_BAR 14.0                      /* bar height */
#define TL_GAP 8.0                       /* px between lanes */
#define TL_DEPTH PMT_TIMELINE_DEPTH
#define TL_LANES 256                     /* lanes drawn at most */
#define TL_CHAR 6.0                      /* px per label character, an estimate */
#define TL_TITLE_MAX 200                 /* bytes of a name shown in a tooltip */
#define TL_LEVELS 8                      /* density opacity steps */

/* Classes of bar: CSS class "cN" and a legend entry each. */
enum { C_PREFILL, C_DECODE, C_SPEC, C_DRAFT, C_BATCH, C_L_EXACT, C_L_DECODE, C_L_VERIFY,
       C_L_BATCHED, C_OTHER, C_BAD, C_KERNEL, C_COPY, C_COUNT, C_MIXED = 255 };

static const struct {
    const char *legend, *fill;
} cls_info[C_COUNT] = {
    {"prefill", "#4e79a7"},      {"decode", "#59a14f"},
    {"spec_decode", "#f28e2b"},  {"draft", "#edc948"},
    {"batch", "#b07aa1"},        {"layer_range mode=exact", "#76b7b2"},
    {"layer_range mode=decode", "#8cd17d"}, {"layer_range mode=verify", "#e15759"},
    {"layer_range mode=batched", "#ffbe7d"}, {"other tools' ranges", "#bab0ac"},
    {"bad name", "#ff00ff"},     {"GPU kernel", "#9c755f"},
    {"GPU copy", "#ff9da7"},
};

typedef struct item {
    uint64_t start, end; /* ns */
    const char *name;
    uint32_t pid, tid;   /* GPU: tid PMT_GPU_TRACK_BASE + stream */
    uint16_t depth;
    uint8_t cls;
} item;

typedef struct lane {
    uint32_t pid, tid;
    size_t first, n; /* its items */
    int depth;       /* deepest row used */
    double y;
} lane;

typedef struct bucket {
    uint64_t busy;  /* ns of ranges under the LOD rule starting in this column */
    uint32_t count;
    uint8_t cls;    /* C_* of them, C_MIXED when several */
} bucket;

static uint8_t class_of(const char *name)
{
    pmt_name nm;
    if (!pmt_name_is_ours(name))
        return C_OTHER;
    if (pmt_name_parse(name, &nm, NULL, 0) < 0)
        return C_BAD;
    switch (nm.kind) {
    case PMT_K_PREFILL: return C_PREFILL;
    case PMT_K_DECODE: return C_DECODE;
    case PMT_K_SPEC_DECODE: return C_SPEC;
    case PMT_K_DRAFT: return C_DRAFT;
    case PMT_K_BATCH: return C_BATCH;
    case PMT_K_LAYER_RANGE:
        return !strcmp(nm.mode, "exact") ? C_L_EXACT : !strcmp(nm.mode, "decode") ? C_L_DECODE
             : !strcmp(nm.mode, "verify") ? C_L_VERIFY : C_L_BATCHED;
    default: return C_OTHER;
    }
}

/* Writes at most max bytes of s as XML, cut at a character boundary, with
 * "…" when cut. */
static void put_cut(FILE *f, const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max) {
        pmt_xml_put(f, s);
        return;
    }
    char buf[TL_TITLE_MAX + 4];
    if (max > TL_TITLE_MAX)
        max = TL_TITLE_MAX;
    while (max && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    memcpy(buf, s, max);
    buf[max] = 0;
    pmt_xml_put(f, buf);
    fputs("\xe2\x80\xa6", f);
}

static int cmp_gpu_item(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

/* The closed ranges in nesting order with their depths, then the GPU
 * activities by process, stream and start: lanes are contiguous. */
static size_t build_items(const pmt_trace *t, const pmt_gpu *g, item *it, size_t *ord)
{
    size_t n = 0, m = 0, stack[TL_DEPTH];
    int d = 0;
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        if (!(r->flags & (PMT_F_OPEN | PMT_F_ORPHAN)) && r->start <= r->end)
            ord[m++] = i;
    }
    pmt_trace_sort_nested(t, ord, m);
    for (size_t i = 0; i < m; i++) {
        const pmt_range *r = &t->r[ord[i]];
        if (i && (t->r[ord[i - 1]].pid != r->pid || t->r[ord[i - 1]].tid != r->tid))
            d = 0;
        while (d && t->r[stack[d - 1]].end <= r->start)
            d--;
        it[n++] = (item){r->start, r->end, r->name, r->pid, r->tid, (uint16_t)d, class_of(r->name)};
        if (d < TL_DEPTH - 1)
            stack[d++] = ord[i];
    }
    size_t g0 = n;
    for (size_t i = 0; g && i < g->nact; i++) {
        const pmt_activity *a = &g->act[i];
        it[n++] = (item){a->start, a->end > a->start ? a->end : a->start, a->name, a->pid,
                         PMT_GPU_TRACK_BASE + a->stream, 0,
                         a->kind == PMT_ACT_KERNEL ? C_KERNEL : C_COPY};
    }
    qsort(it + g0, n - g0, sizeof *it, cmp_gpu_item);
    return n;
}

/* Lanes over the items (contiguous per pid, tid): the first max are
 * kept; *nall counts them all. */
static size_t build_lanes(const item *it, size_t n, lane *ln, size_t max, size_t *nall)
{
    size_t nl = 0;
    int take = 0;
    *nall = 0;
    for (size_t i = 0; i < n; i++) {
        if (!i || it[i].pid != it[i - 1].pid || it[i].tid != it[i - 1].tid) {
            ++*nall;
            take = nl < max;
            if (take)
                ln[nl++] = (lane){it[i].pid, it[i].tid, i, 0, 0, 0};
        }
        if (!take)
            continue;
        ln[nl - 1].n++;
        if (it[i].depth > ln[nl - 1].depth)
            ln[nl - 1].depth = it[i].depth;
    }
    return nl;
}

/* The axis step: 1, 2 or 5 times a power of ten ns, about ten ticks over span. */
static void axis_step(uint64_t span, uint64_t *step, uint64_t *unit, const char **uname)
{
    uint64_t raw = span / 10 ? span / 10 : 1, p = 1;
    while (p <= UINT64_MAX / 10 && p * 10 <= raw)
        p *= 10;
    *step = p >= raw ? p : 2 * p >= raw ? 2 * p : 5 * p >= raw ? 5 * p : 10 * p;
    *unit = *step >= 1000000000u ? 1000000000u : *step >= 1000000u ? 1000000u : *step >= 1000u ? 1000u : 1;
    *uname = *unit == 1000000000u ? "s" : *unit == 1000000u ? "ms" : *unit == 1000u ? "us" : "ns";
}

typedef struct view {
    FILE *f;
    uint64_t t0, span;
    double scale; /* px per ns */
    double y_axis, y_end;
} view;

static void put_header(view *v, size_t n, size_t nlanes, size_t nall, int html,
                       double height)
{
    FILE *f = v->f;
    if (html)
        fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
              "<title>phasemark timeline</title>"
              "<style>body{margin:0;background:#fff}</style></head><body>\n", f);
    else
        fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n<style>",
            TL_LEFT + TL_WIDTH + 20, height);
    for (int c = 0; c < C_COUNT; c++)
        fprintf(f, ".c%d{fill:%s}", c, cls_info[c].fill);
    fputs(".cm{fill:#888}.g{stroke:#ddd;stroke-width:0.5}.a{stroke:#333}"
          ".t{font-size:10px;pointer-events:none}.b{fill:#f4f4f4}</style>\n", f);
    fprintf(f, "<text x=\"4\" y=\"16\" font-weight=\"bold\">phasemark timeline: %zu ranges and "
               "activities on %zu lanes, %.3f ms</text>\n", n, nall, v->span / 1e6);
    if (nall > nlanes)
        fprintf(f, "<text x=\"4\" y=\"30\">%zu lanes not drawn (at most %d)</text>\n",
                nall - nlanes, TL_LANES);
}

/* The legend: a swatch per class present, wrapped to the picture's width;
 * f NULL only lays it out. Returns the baseline of its last row. */
static double put_legend(FILE *f, const int *present, double y)
{
    double x = 4;
    for (int c = 0; c < C_COUNT; c++) {
        if (!present[c])
            continue;
        double w = 16 + TL_CHAR * (double)strlen(cls_info[c].legend) + 14;
        if (x + w > TL_LEFT + TL_WIDTH) {
            x = 4;
            y += 16;
        }
        if (f)
            fprintf(f, "<rect class=\"c%d\" x=\"%.0f\" y=\"%.0f\" width=\"10\" height=\"10\"/>"
                       "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                    c, x, y - 9, x + 14, y, cls_info[c].legend);
        x += w;
    }
    return y;
}

static void put_axis(view *v)
{
    uint64_t step, unit;
    const char *uname;
    axis_step(v->span, &step, &unit, &uname);
    fprintf(v->f, "<line class=\"a\" x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\"/>\n", TL_LEFT,
            v->y_axis, TL_LEFT + TL_WIDTH, v->y_axis);
    for (uint64_t k = 0; k <= v->span / step; k++) {
        double x = TL_LEFT + (double)(k * step) * v->scale;
        fprintf(v->f, "<line class=\"g\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%llu %s</text>\n",
                x, v->y_axis - 3, x, v->y_end, x, v->y_axis - 6,
                (unsigned long long)(k * step / unit), uname);
    }
}

static void put_lane_label(FILE *f, const lane *l, const pmt_label *names, size_t nnames)
{
    const char *tn = pmt_lane_name_of(names, nnames, l->pid, l->tid);
    const char *pn = pmt_lane_name_of(names, nnames, l->pid, 0);
    const char *nm = tn ? tn : pn;
    fprintf(f, "<rect class=\"b\" x=\"0\" y=\"%.1f\" width=\"%.0f\" height=\"%.1f\"/>\n"
               "<text x=\"4\" y=\"%.1f\">",
            l->y - 2, TL_LEFT + TL_WIDTH + 20, (l->depth + 1) * TL_ROW + 2, l->y + 11);
    if (l->tid >= PMT_GPU_TRACK_BASE)
        fprintf(f, "GPU stream %u \xc2\xb7 pid %u", l->tid - PMT_GPU_TRACK_BASE, l->pid);
    else {
        if (nm) {
            put_cut(f, nm, 40);
            fputs(" \xc2\xb7 ", f);
        }
        fprintf(f, "pid %u \xc2\xb7 tid %u", l->pid, l->tid);
    }
    fputs("</text>\n", f);
    for (int d = 1; d <= l->depth; d++)
        fprintf(f, "<text class=\"t\" x=\"%.0f\" y=\"%.1f\">d%d</text>\n", TL_LEFT - 22,
                l->y + d * TL_ROW + 11, d);
}

/* A duration in the unit that reads best: ns, us, ms or s (3 decimals). */
static void put_dur(FILE *f, uint64_t ns)
{
    if (ns < 1000)
        fprintf(f, "%llu ns", (unsigned long long)ns);
    else
        fprintf(f, "%.3f %s", ns < 1000000 ? ns / 1e3 : ns < 1000000000 ? ns / 1e6 : ns / 1e9,
                ns < 1000000 ? "us" : ns < 1000000000 ? "ms" : "s");
}

/* A bar drawn on its own, with its tooltip and, where it fits, a label. */
static void put_bar(view *v, const item *it, double x, double y, double w)
{
    FILE *f = v->f;
    fprintf(f, "<rect class=\"c%d\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.0f\"><title>",
            it->cls, x, y, w, TL_BAR);
    put_cut(f, it->name, TL_TITLE_MAX);
    fputs(" (", f);
    put_dur(f, it->end - it->start);
    fputs(")</title></rect>\n", f);
    size_t fit = (size_t)((w - 4) / TL_CHAR);
    if (fit < 4)
        return;
    /* The name without its prefix (the same on every bar); where it does
     * not fit, its kind alone; where that does not, the kind cut short. */
    const char *text = it->name;
    if (it->cls != C_OTHER && strchr(text, '.'))
        text = strchr(text, '.') + 1;
    size_t len = strlen(text), word = strcspn(text, " ");
    fprintf(f, "<text class=\"t\" x=\"%.1f\" y=\"%.1f\">", x + 2, y + 10.5);
    if (len > fit && word < len && word <= fit && word <= TL_TITLE_MAX) {
        char kind[TL_TITLE_MAX + 1];
        memcpy(kind, text, word);
        kind[word] = 0;
        pmt_xml_put(f, kind);
    } else {
        put_cut(f, text, len <= fit ? fit : fit - 1);
    }
    fputs("</text>\n", f);
}

/* Density bars of one row from its buckets, then clears them. */
static void put_density(view *v, bucket *b, double y)
{
    double col_ns = 1 / v->scale;
    for (size_t c = 0; c < PMT_TIMELINE_WIDTH;) {
        if (!b[c].count) {
            c++;
            continue;
        }
        unsigned lv = (unsigned)((double)b[c].busy / col_ns * TL_LEVELS + 0.999999);
        lv = lv > TL_LEVELS ? TL_LEVELS : lv ? lv : 1;
        size_t e = c + 1;
        uint64_t busy = b[c].busy, count = b[c].count;
        while (e < PMT_TIMELINE_WIDTH && b[e].count && b[e].cls == b[c].cls) {
            unsigned l2 = (unsigned)((double)b[e].busy / col_ns * TL_LEVELS + 0.999999);
            l2 = l2 > TL_LEVELS ? TL_LEVELS : l2 ? l2 : 1;
            if (l2 != lv)
                break;
            busy += b[e].busy, count += b[e].count;
            e++;
        }
        double share = (double)busy / (col_ns * (double)(e - c));
        if (b[c].cls == C_MIXED)
            fputs("<rect class=\"cm\"", v->f);
        else
            fprintf(v->f, "<rect class=\"c%d\"", b[c].cls);
        fprintf(v->f, " x=\"%.0f\" y=\"%.1f\" width=\"%zu\" height=\"%.0f\" fill-opacity=\"%.3f\">"
                      "<title>%llu ranges under 1 px, %.0f%% busy</title></rect>\n",
                TL_LEFT + (double)c, y, e - c, TL_BAR, (double)lv / TL_LEVELS,
                (unsigned long long)count, share > 1 ? 100.0 : share * 100);
        memset(&b[c], 0, (e - c) * sizeof *b);
        c = e;
    }
}

/* Draws one lane's items: wide ones as bars, the rest into density. */
static size_t put_lane(view *v, const lane *l, const item *it, bucket *bk)
{
    double last_end[TL_DEPTH];
    size_t ndens = 0;
    for (int d = 0; d <= l->depth; d++)
        last_end[d] = -1;
    for (size_t i = l->first; i < l->first + l->n; i++) {
        const item *x = &it[i];
        double px = (double)(x->start - v->t0) * v->scale, w = (double)(x->end - x->start) * v->scale;
        double y = l->y + x->depth * TL_ROW;
        if (w >= 1 && px >= last_end[x->depth]) {
            put_bar(v, x, TL_LEFT + px, y, w);
            last_end[x->depth] = px + w;
            continue;
        }
        size_t col = px < 0 ? 0 : px >= TL_WIDTH ? PMT_TIMELINE_WIDTH - 1 : (size_t)px;
        bucket *b = &bk[(size_t)x->depth * PMT_TIMELINE_WIDTH + col];
        b->cls = !b->count || b->cls == x->cls ? x->cls : C_MIXED;
        b->busy += x->end - x->start;
        b->count++;
        ndens++;
    }
    for (int d = 0; ndens && d <= l->depth; d++)
        put_density(v, &bk[(size_t)d * PMT_TIMELINE_WIDTH], l->y + d * TL_ROW);
    return ndens;
}

static int timeline(const pmt_trace *t, const pmt_gpu *g, int html, FILE *f)
{
    size_t cap = t->n + (g ? g->nact : 0) + 1, n, nall, nnames = 0;
    item *it = malloc(cap * sizeof *it);
    size_t *ord = malloc((t->n + 1) * sizeof *ord);
    lane *ln = malloc(TL_LANES * sizeof *ln);
    bucket *bk = calloc((size_t)TL_DEPTH * PMT_TIMELINE_WIDTH, sizeof *bk);
    pmt_label *names = NULL;
    int rc = -1;
    if (!it || !ord || !ln || !bk || pmt_lane_names(t, &names, &nnames) < 0)
        goto done;
    n = build_items(t, g, it, ord);
    size_t nl = build_lanes(it, n, ln, TL_LANES, &nall);
    view v = {f, UINT64_MAX, 0, 0, 0, 0};
    uint64_t t1 = 0;
    int present[C_COUNT] = {0}, any_small = 0;
    for (size_t i = 0; i < n; i++) {
        v.t0 = it[i].start < v.t0 ? it[i].start : v.t0;
        t1 = it[i].end > t1 ? it[i].end : t1;
        present[it[i].cls] = 1;
    }
    v.span = n && t1 > v.t0 ? t1 - v.t0 : 1;
    v.t0 = n ? v.t0 : 0;
    v.scale = TL_WIDTH / (double)v.span;
    for (size_t i = 0; i < n && !any_small; i++)
        any_small = (double)(it[i].end - it[i].start) * v.scale < 1;
    /* Layout first (the height goes in the header): legend rows, axis, lanes. */
    double y_leg = nall > nl ? 48 : 36;
    v.y_axis = put_legend(NULL, present, y_leg) + (any_small ? 16 : 0) + 30;
    double y = v.y_axis + 8;
    for (size_t i = 0; i < nl; i++) {
        ln[i].y = y;
        y += (ln[i].depth + 1) * TL_ROW + TL_GAP;
    }
    v.y_end = y;
    put_header(&v, n, nl, nall, html, y + 10);
    double ly = put_legend(f, present, y_leg);
    if (any_small)
        fprintf(f, "<text x=\"4\" y=\"%.0f\">Pale bars: ranges narrower than one pixel "
                   "(%.3f us) as density: their kind's colour (grey: mixed), opacity = busy "
                   "share of the pixel, in eighths</text>\n",
                ly + 16, (double)v.span / TL_WIDTH / 1e3);
    for (size_t i = 0; i < nl; i++)
        put_lane_label(f, &ln[i], names, nnames);
    put_axis(&v);
    for (size_t i = 0; i < nl; i++)
        put_lane(&v, &ln[i], it, bk);
    fputs(html ? "</svg>\n</body></html>\n" : "</svg>\n", f);
    rc = ferror(f) ? -1 : 0;
done:
    pmt_lane_names_free(names, nnames);
    free(it), free(ord), free(ln), free(bk);
    return rc;
}

int pmt_svg(const pmt_trace *t, const pmt_gpu *g, FILE *f)
{
    return timeline(t, g, 0, f);
}

int pmt_html(const pmt_trace *t, const pmt_gpu *g, FILE *f)
{
    return timeline(t, g, 1, f);
}
