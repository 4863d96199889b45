/* The weights' bytes and the memory check (runtime/memory.h). */
#include "runtime/memory.h"

#include "runtime/arch.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static double bytes_of(const sq_model_config *c, sq_weight_dtype dt, int read)
{
    const double es = dt == SQ_DTYPE_F16 || dt == SQ_DTYPE_BF16 ? 2.0 : 4.0;
    const int count = sq_arch_count(c);
    double total = 0;
    for (int k = 0; k < count; k++) {
        sq_arch_item it;
        sq_arch_tensor_at(c, k, &it);
        if (read ? it.layer < 0 && it.t->slot == SQ_M_EMBED : it.tied)
            continue;   /* read: the embedding's rows only (its tied LM head counts whole) */
        total += (double)it.numel * (it.ndim == 2 ? es : 4.0);
    }
    return total;
}

double sq_weights_bytes(const sq_model_config *c)
{
    return bytes_of(c, sq_model_dtype_of_name(c->dtype), 0);
}

double sq_weights_read_bytes(const sq_model_config *c, sq_weight_dtype dtype)
{
    return bytes_of(c, dtype == SQ_DTYPE_AUTO ? sq_model_dtype_of_name(c->dtype) : dtype, 1);
}

double sq_memory_total(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}

int sq_memory_check(double need, sq_error *err, const char *advice, const char *fmt, ...)
{
    const double have = sq_memory_total();
    if (!(have > 0 && need > 0.8 * have))
        return SQ_OK;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sq_error_set(err, SQ_EUSAGE, "%s, more than 80%% of this machine's %.2f GiB; %s", what,
                        have / 1073741824.0, advice);
}
