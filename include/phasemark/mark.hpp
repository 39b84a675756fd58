/* phasemark/mark.hpp — C++ scoped ranges over phasemark/mark.h.
 *
 * pm::scoped_range owns one pm_range token and pops it when it goes out of
 * scope. It moves (the source gives its token up and pops nothing) and does
 * not copy: two owners of one token would pop the enclosing range early.
 * Everything is noexcept and inline; the disabled path is mark.h's one load
 * and branch. Same threading rule as mark.h: destroy on the pushing thread.
 *
 *   {
 *       auto p = pm::scoped_prefill(req, pos, n);   // pops at the brace
 *       pm_layer_attr a = PM_LAYER_ATTR_INIT; ...
 *       auto l = pm::scoped_layer_range(a);
 *   }
 *
 * Needs C++11. Identity, pm_enable and the rest are mark.h's C API.
 */
#ifndef PHASEMARK_MARK_HPP
#define PHASEMARK_MARK_HPP

#include "phasemark/mark.h"

namespace pm {

class scoped_range {
public:
    scoped_range() noexcept : r_(PM_RANGE_NONE) {}
    explicit scoped_range(pm_range r) noexcept : r_(r) {}
    scoped_range(scoped_range &&o) noexcept : r_(o.r_) { o.r_ = PM_RANGE_NONE; }
    scoped_range &operator=(scoped_range &&o) noexcept
    {
        if (this != &o) {
            pm_range_pop(&r_);
            r_ = o.r_;
            o.r_ = PM_RANGE_NONE;
        }
        return *this;
    }
    scoped_range(const scoped_range &) = delete;
    scoped_range &operator=(const scoped_range &) = delete;
    ~scoped_range() { pm_range_pop(&r_); }

    /* Ends the range now; the destructor then does nothing. */
    void pop() noexcept { pm_range_pop(&r_); }
    /* True while a backend holds the pushed range. */
    bool live() const noexcept { return r_.depth >= 0; }

private:
    pm_range r_;
};

inline scoped_range scoped(const char *text) noexcept { return scoped_range(pm_range_push(text)); }
inline scoped_range scoped_prefill(uint64_t req, uint32_t pos, uint32_t tokens) noexcept
{
    return scoped_range(pm_prefill_push(req, pos, tokens));
}
inline scoped_range scoped_decode(uint64_t req, uint32_t pos) noexcept
{
    return scoped_range(pm_decode_push(req, pos));
}
inline scoped_range scoped_spec_decode(uint64_t req, uint32_t draft) noexcept
{
    return scoped_range(pm_spec_decode_push(req, draft));
}
inline scoped_range scoped_draft(uint64_t req, uint32_t tokens) noexcept
{
    return scoped_range(pm_draft_push(req, tokens));
}
inline scoped_range scoped_layer_range(const pm_layer_attr &attr) noexcept
{
    return scoped_range(pm_layer_range_push(&attr));
}
inline scoped_range scoped_batch(uint64_t batch, pm_phase mode, const pm_batch_req *reqs,
                                 uint32_t n) noexcept
{
    return scoped_range(pm_batch_push(batch, mode, reqs, n));
}
inline scoped_range scoped_phase(pm_phase phase) noexcept
{
    return scoped_range(pm_phase_enter(phase));
}

} // namespace pm

#endif
